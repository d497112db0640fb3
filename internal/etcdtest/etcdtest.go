package etcdtest

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/embedetcd"
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
		cport, pport, err := freePorts()
		if err != nil {
			t.Fatalf("etcdtest: %v", err)
		}
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

// freePorts returns two distinct free TCP ports on 127.0.0.1.
func freePorts() (int, int, error) {
	l1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l1.Close()
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l2.Close()
	return l1.Addr().(*net.TCPAddr).Port, l2.Addr().(*net.TCPAddr).Port, nil
}
