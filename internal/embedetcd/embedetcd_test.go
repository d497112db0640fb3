package embedetcd

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/freeport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartPutGet(t *testing.T) {
	srv, err := Start(Config{
		Dir:           t.TempDir(),
		ClientURL:     fmt.Sprintf("http://127.0.0.1:%d", freeport.Port(t)),
		PeerURL:       fmt.Sprintf("http://127.0.0.1:%d", freeport.Port(t)),
		UnsafeNoFsync: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	defer srv.Close() // idempotent
	c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	r, err := c.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
		t.Fatalf("got %v", r.Kvs)
	}
}

func TestPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	_, err = Start(Config{
		Dir:       t.TempDir(),
		ClientURL: "http://" + addr,
		PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", freeport.Port(t)),
	})
	if err == nil {
		t.Fatal("expected an error for a taken port")
	}
	if !strings.Contains(err.Error(), addr) {
		t.Fatalf("error does not name %s: %v", addr, err)
	}
}

func TestBadConfig(t *testing.T) {
	for _, c := range []Config{
		{ClientURL: "http://127.0.0.1:1", PeerURL: "http://127.0.0.1:2"},
		{Dir: t.TempDir(), ClientURL: "", PeerURL: "http://127.0.0.1:2"},
		{Dir: t.TempDir(), ClientURL: "tcp://127.0.0.1:1", PeerURL: "http://127.0.0.1:2"},
		{Dir: t.TempDir(), ClientURL: "http://127.0.0.1:1", PeerURL: "http://"},
	} {
		if _, err := Start(c); err == nil {
			t.Errorf("Start(%+v): expected error", c)
		}
	}
}
