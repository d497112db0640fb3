package etcdtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/embedetcd"
	"github.com/consumerd/consumerd/internal/freeport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// StartServer starts a fresh embedded etcd on free loopback ports with its
// data in t.TempDir(), and returns its client endpoints. The server is closed
// by t.Cleanup. Any failure fails the test.
func StartServer(t testing.TB) (endpoints []string) {
	t.Helper()
	var lastErr error
	// Free ports can be stolen between probe and bind; retry a few times.
	for attempt := 0; attempt < 5; attempt++ {
		cport, pport := freeport.Port(t), freeport.Port(t)
		srv, err := embedetcd.Start(embedetcd.Config{
			Dir:           t.TempDir(),
			ClientURL:     fmt.Sprintf("http://127.0.0.1:%d", cport),
			PeerURL:       fmt.Sprintf("http://127.0.0.1:%d", pport),
			Name:          "etcdtest",
			UnsafeNoFsync: true,
			SnapshotCount: 1000,
			StartTimeout:  30 * time.Second,
		})
		if err != nil {
			lastErr = err
			continue
		}
		t.Cleanup(srv.Close)
		return srv.Endpoints()
	}
	t.Fatalf("etcdtest: %v", lastErr)
	return nil
}

// Start starts a fresh embedded etcd (see StartServer) and returns a client
// connected to it; both are closed by t.Cleanup.
func Start(t testing.TB) *clientv3.Client {
	t.Helper()
	eps := StartServer(t)
	return NewClient(t, eps)
}

// NewClient returns a client for endpoints, closed by t.Cleanup.
func NewClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcdtest: connecting to %v: %v", endpoints, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
