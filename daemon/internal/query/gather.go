package query

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/shard"
)

// MaxParallel bounds the shard queries a Gather has in flight.
const MaxParallel = 16

// ForwardedHeader marks a /v1/query request that a member forwarded to the
// shard's primary; the receiver never forwards it again (one hop, no loops).
const ForwardedHeader = "Consumerd-Forwarded"

// Gather asks each shard of ids (of app) for key (or, when all, every key)
// from the shard's primary, and returns each shard's values. It fails when
// a shard has no primary or does not answer, so a result is never silently
// partial.
func Gather(ctx context.Context, hc *http.Client, snap allocator.Snapshot, app shard.App, ids []string, key string, all bool) (map[string]map[string]string, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("app %s: no shard to ask", app.Name)
	}
	type answer struct {
		id   string
		vals map[string]string
		err  error
	}
	answers := make(chan answer, len(ids))
	sem := make(chan struct{}, MaxParallel)
	for _, id := range ids {
		go func() { // owned here: sends exactly one answer, bounded by ctx
			sem <- struct{}{}
			defer func() { <-sem }()
			vals, err := AskShard(ctx, hc, snap, app.Name, id, key, all)
			answers <- answer{id, vals, err}
		}()
	}
	per := map[string]map[string]string{}
	var errs []error
	for range ids {
		a := <-answers
		if a.err != nil {
			errs = append(errs, a.err)
			continue
		}
		per[a.id] = a.vals
	}
	if len(errs) > 0 {
		sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return nil, errors.New(strings.Join(msgs, "; "))
	}
	return per, nil
}

// Merge merges per-shard values in shard id order (pure).
func Merge(app shard.App, ids []string, per map[string]map[string]string) (map[string]string, error) {
	out := map[string]string{}
	from := map[string]string{}
	for _, id := range ids {
		for k, v := range per[id] {
			prev, seen := out[k]
			if !seen {
				out[k], from[k] = v, id
				continue
			}
			if app.Merge == nil {
				return nil, fmt.Errorf("key %s is on shards %s and %s, and app %s has no Merge", api.DescribeKey(k), from[k], id, app.Name)
			}
			m, err := app.Merge(prev, v)
			if err != nil {
				return nil, fmt.Errorf("merging key %s of shard %s: %w", api.DescribeKey(k), id, err)
			}
			out[k] = m
		}
	}
	return out, nil
}

// AskShard asks shard id's primary (per snap) for its values.
func AskShard(ctx context.Context, hc *http.Client, snap allocator.Snapshot, app, id, key string, all bool) (map[string]string, error) {
	p, ep, ok := shard.PrimaryOf(snap, id)
	if !ok {
		return nil, fmt.Errorf("shard %s has no primary", id)
	}
	if p.Status.State != allocator.StatePrimary {
		return nil, fmt.Errorf("shard %s: primary %s/%s is %s, not PRIMARY yet", id, p.Zone, p.Member, p.Status.State)
	}
	if ep == "" {
		return nil, fmt.Errorf("shard %s: primary %s/%s has no endpoint", id, p.Zone, p.Member)
	}
	v := url.Values{"app": {app}, "shard": {id}}
	if all {
		v.Set("all", "1")
	} else {
		v.Set("key_b64", base64.RawURLEncoding.EncodeToString([]byte(key)))
	}
	u := ep + "/v1/query?" + v.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("shard %s: querying primary %s/%s: %w", id, p.Zone, p.Member, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var eb api.ErrorResponse
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
			eb.Error = strings.TrimSpace(string(b))
		}
		return nil, fmt.Errorf("shard %s: primary %s/%s at %s: %s: %s", id, p.Zone, p.Member, ep, resp.Status, eb.Error)
	}
	var qr api.QueryResponse
	if err := json.NewDecoder(resp.Body).Decode(&qr); err != nil {
		return nil, fmt.Errorf("shard %s: decoding answer of %s: %w", id, ep, err)
	}
	es, ok := qr.Shards[id]
	if !ok {
		return nil, fmt.Errorf("shard %s: primary at %s did not answer for it", id, ep)
	}
	vals, err := api.DecodeEntries(es)
	if err != nil {
		return nil, fmt.Errorf("shard %s: answer of %s: %w", id, ep, err)
	}
	return vals, nil
}
