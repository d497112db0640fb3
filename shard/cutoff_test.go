package shard_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// blackhole relays TCP to target until cut, then swallows every byte both
// ways while keeping connections open: a network partition as a client
// sees it (requests hang until their deadline), not a refused connection.
type blackhole struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func newBlackhole(t *testing.T, target string) *blackhole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, target: target}
	b.wg.Add(1)
	go func() { // owned by b: ends when Close closes the listener
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			b.mu.Lock()
			b.conns = append(b.conns, c, up)
			b.mu.Unlock()
			b.wg.Add(2)
			go b.relay(c, up)
			go b.relay(up, c)
		}
	}()
	t.Cleanup(b.Close)
	return b
}

// relay copies from src to dst until src fails, dropping bytes once cut.
func (b *blackhole) relay(src, dst net.Conn) {
	defer b.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !b.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or closed: the peer or Close ended it
		}
	}
}

func (b *blackhole) Close() {
	_ = b.ln.Close()
	b.mu.Lock()
	for _, c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// TestFailedWriteEndsWithTheSession: a member is cut off from etcd just as
// its replica fails. The replica's FAILED write cannot reach etcd; it must
// end when the member's session does (its lease, 2 s here, expired), not
// after the write's own 10 s, so the member can tear down and rejoin at
// once. Service.Run returns ErrLeaseLost well inside those 10 s.
func TestFailedWriteEndsWithTheSession(t *testing.T) {
	cut := make(chan struct{})
	failing := shardtest.HookedApp("failing", func(s shard.Shard, env topic.Envelope) error {
		if string(env.Message.Payload) == "FAIL" {
			<-cut // etcd is unreachable from now on
			return errors.New("cannot count FAIL")
		}
		return nil
	})
	e := shardtest.NewCluster(t, memory.NewBuilder(), failing)
	u, err := url.Parse(e.Client.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	hole := newBlackhole(t, u.Host)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + hole.ln.Addr().String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	m, err := allocator.NewMember(context.Background(), allocator.Config{
		Client: cli, Prefix: e.Prefix, Zone: "z", MemberID: "cut", LeaseTTL: 2 * time.Second,
		Spec: allocator.MemberSpec{Endpoint: "http://cut", ItemLimit: 10}, DecodeItem: shard.DecodeSpec, Logger: e.Logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	op, err := wal.NewOpenerBuilder(e.Backend).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	svc := shard.NewService(shard.Config{Member: m, Opener: op, DataDir: t.TempDir(), Apps: map[string]shard.App{"failing": failing},
		Topics: shard.EtcdTopics(e.Client, e.Prefix), Logger: hclog.NewNullLogger(), Terms: &allocator.Terms{Client: e.Client, Prefix: e.Prefix}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = m.Run(ctx) }()
	runErr := make(chan error, 1)
	go func() { defer wg.Done(); runErr <- svc.Run(ctx) }()
	defer wg.Wait()
	defer cancel()

	spec := &shard.Spec{ID: "f-0", App: "failing", Sources: []shard.Source{{Topic: "words", Partition: 0}}}
	e.PutTopic(topic.Description{Name: "words", Partitions: 1})
	e.PutSpec(spec)
	a := allocator.Assignment{Item: spec.ID, Zone: "z", Member: "cut", Slot: 0}
	if _, err := e.Client.Put(context.Background(), allocator.AssignmentKey(e.Prefix, a), `{"state":"IDLE"}`, clientv3.WithLease(m.LeaseID())); err != nil {
		t.Fatal(err)
	}
	shardtest.Eventually(t, "the replica to be PRIMARY", func() (bool, string) {
		resp, err := e.Client.Get(context.Background(), allocator.AssignmentKey(e.Prefix, a))
		if err != nil || len(resp.Kvs) == 0 {
			return false, "no key"
		}
		return strings.Contains(string(resp.Kvs[0].Value), `"state":"PRIMARY"`), string(resp.Kvs[0].Value)
	})
	e.Publish(0, "FAIL")
	hole.cut.Store(true)
	defer hole.cut.Store(false) // heal before the deferred teardown, which talks to etcd
	start := time.Now()
	close(cut)
	select {
	case err := <-runErr:
		if !errors.Is(err, shard.ErrLeaseLost) {
			t.Fatalf("Service.Run: %v, want ErrLeaseLost", err)
		}
		t.Logf("Service.Run returned %s after the cut", time.Since(start))
		if d := time.Since(start); d > 8*time.Second { // a bound: the lease is 2 s, the write's own timeout 10 s
			t.Fatalf("Service.Run returned %s after the cut: the FAILED write outlived the session", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Service.Run did not return within 30 s of the cut")
	}
}
