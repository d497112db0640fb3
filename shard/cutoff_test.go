package shard_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/internal/blackhole"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

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
	hole := blackhole.New(t, u.Host)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + hole.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
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
	hole.Cut()
	defer hole.Heal() // heal before the deferred teardown, which talks to etcd
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
