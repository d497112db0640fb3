package cmdline

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

func TestEnvName(t *testing.T) {
	for flag, want := range map[string]string{
		"etcd.lease-ttl":           "CONSUMERD_ETCD_LEASE_TTL",
		"etcd.endpoints":           "CONSUMERD_ETCD_ENDPOINTS",
		"data-dir":                 "CONSUMERD_DATA_DIR",
		"embedded.etcd-client-url": "CONSUMERD_EMBEDDED_ETCD_CLIENT_URL",
		"app":                      "CONSUMERD_APP",
	} {
		if got := EnvName(flag); got != want {
			t.Errorf("envName(%q) = %q, want %q", flag, got, want)
		}
	}
}

// TestJSONLogDurations: JSON logs print durations as Go duration strings,
// also through loggers derived with With and Named.
func TestJSONLogDurations(t *testing.T) {
	var b bytes.Buffer
	l := NewLogger("info", "json", &b)
	l.Named("shard").With("since", 1500*time.Millisecond).Info("caught up", "took", 2*time.Second, "n", 3)
	var line map[string]any
	if err := json.Unmarshal(b.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, b.String())
	}
	if line["took"] != "2s" || line["since"] != "1.5s" || line["n"] != float64(3) {
		t.Fatalf("JSON log line %s: want took \"2s\", since \"1.5s\", n 3", b.String())
	}
}
