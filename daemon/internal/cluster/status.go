package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/consumerd/consumerd/daemon/api"
)

func FetchStatus(ctx context.Context, hc *http.Client, endpoint string) (*api.StatusResponse, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/v1/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s/v1/status: %s: %s", endpoint, resp.Status, strings.TrimSpace(string(b)))
	}
	var st api.StatusResponse
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("GET %s/v1/status: decoding: %w", endpoint, err)
	}
	return &st, nil
}
