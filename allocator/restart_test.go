package allocator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/embedetcd"
	"github.com/consumerd/consumerd/internal/freeport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestEtcdRestart: while etcd is down, a member whose lease cannot be renewed
// sees Done close within about its TTL and Run return ErrLeaseLost; a
// KeySpace watch resumes by itself once etcd is back.
func TestEtcdRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := embedetcd.Config{
		Dir:           dir,
		ClientURL:     fmt.Sprintf("http://127.0.0.1:%d", freeport.Port(t)),
		PeerURL:       fmt.Sprintf("http://127.0.0.1:%d", freeport.Port(t)),
		UnsafeNoFsync: true,
	}
	srv, err := embedetcd.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			srv.Close()
		}
	}()
	// Closed before the server (defers run last-first): a server stopping
	// with client streams open waits for them.
	c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const p = "/rs"

	m, err := NewMember(ctx, Config{Client: c, Prefix: p, Zone: "a", MemberID: "m1", LeaseTTL: 2 * time.Second, Spec: MemberSpec{ItemLimit: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	runErr := make(chan error, 1)
	go func() { runErr <- m.Run(rctx) }()
	nextLocal(t, m, func(LocalState) bool { return true })

	ks := NewKeySpace(c, p, nil, nil)
	if err := ks.Load(ctx); err != nil {
		t.Fatal(err)
	}
	defer watchInBackground(ctx, ks)()

	srv.Close()
	stopped = true
	down := time.Now()
	select {
	case <-m.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed while etcd was down")
	}
	if d := time.Since(down); d > 5*time.Second {
		t.Errorf("Done closed %s after etcd went down (TTL 2s)", d)
	}
	select {
	case err := <-runErr:
		if !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}

	t.Logf("lease lost after %s", time.Since(down))
	srv, err = embedetcd.Start(cfg)
	t.Logf("restarted after %s", time.Since(down))
	if err != nil {
		t.Fatal(err)
	}
	stopped = false
	rev := putJSON(t, c, ItemKey(p, "after"), map[string]any{})
	if err := ks.WaitForRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	t.Logf("mirror caught up after %s", time.Since(down))
	if _, ok := ks.Snapshot().Items["after"]; !ok {
		t.Fatal("mirror missed a write made after the restart")
	}
}
