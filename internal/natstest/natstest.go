package natstest

import (
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/consumerd/consumerd/internal/embednats"
)

// Start starts a fresh embedded nats-server with JetStream on a free port and a
// fresh t.TempDir() store, registers its shutdown with t.Cleanup, and returns
// its client URL. It fails the test if the server does not start.
func Start(t testing.TB) string {
	t.Helper()
	return StartServer(t, embednats.Config{}).URL()
}

// StartServer starts an embedded nats-server from cfg, filling in defaults:
// Host 127.0.0.1, Port a free port (when zero), StoreDir a fresh t.TempDir()
// (when empty), Logger the test log at warn level (when nil). Shutdown is
// registered with t.Cleanup (calling it earlier is fine).
func StartServer(t testing.TB, cfg embednats.Config) *embednats.Server {
	t.Helper()
	if cfg.StoreDir == "" {
		cfg.StoreDir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{
			Name:   t.Name(),
			Level:  hclog.Warn,
			Output: testWriter{t},
		})
	}
	s, err := embednats.Start(cfg)
	if err != nil {
		t.Fatalf("natstest: start nats-server: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// testWriter sends log output to t.Log, so it shows only for failing or
// verbose tests. Writes after the test ended are dropped.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // t.Log panics after the test completed
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}
