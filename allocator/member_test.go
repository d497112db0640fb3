package allocator

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type runningMember struct {
	m      *Member
	cancel context.CancelFunc
	done   chan error
}

func startMember(t *testing.T, c *clientv3.Client, prefix, zone, id string, limit int) *runningMember {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := NewMember(ctx, Config{Client: c, Prefix: prefix, Zone: zone, MemberID: id,
		LeaseTTL: 10 * time.Second, Spec: MemberSpec{ItemLimit: limit}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	rm := &runningMember{m: m, cancel: rcancel, done: make(chan error, 1)}
	go func() { rm.done <- m.Run(rctx) }()
	t.Cleanup(func() {
		rcancel()
		<-rm.done
		_ = m.Close()
	})
	return rm
}

// nextLocal waits for a Local state satisfying ok.
func nextLocal(t *testing.T, m *Member, ok func(LocalState) bool) LocalState {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case st := <-m.Local():
			if ok(st) {
				return st
			}
		case <-deadline:
			t.Fatal("timed out waiting for a local state")
		}
	}
}

func TestMemberLocalAndUpdateStatus(t *testing.T) {
	c := etcdtest.Start(t)
	const p = "/mt"
	rm := startMember(t, c, p, "a", "m1", 10)
	m := rm.m
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if st := nextLocal(t, m, func(LocalState) bool { return true }); len(st.Assignments) != 0 {
		t.Fatalf("first state %+v", st)
	}
	putJSON(t, c, ItemKey(p, "s1"), map[string]any{"hot_standbys": 0, "app": "x"})
	st := nextLocal(t, m, func(st LocalState) bool { return len(st.Assignments) == 1 })
	a := st.Assignments[0]
	if a.Item != "s1" || a.Slot != 0 || a.Status.State != StateIdle || !strings.Contains(string(st.Items["s1"]), `"app":"x"`) {
		t.Fatalf("local state %+v items %s", st, st.Items["s1"])
	}
	// The assignment is under this member's lease.
	resp, err := c.Get(ctx, AssignmentKey(p, a))
	if err != nil || len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != m.LeaseID() {
		t.Fatalf("assignment kv %+v err %v (lease %x)", resp, err, m.LeaseID())
	}
	if err := m.UpdateStatus(ctx, a, ReplicaStatus{State: StatePrimary, Error: strings.Repeat("e", 10000)}); err != nil {
		t.Fatal(err)
	}
	st = nextLocal(t, m, func(st LocalState) bool {
		return len(st.Assignments) == 1 && st.Assignments[0].Status.State == StatePrimary
	})
	if got := st.Assignments[0]; got.CreateRevision != a.CreateRevision || len(got.Status.Error) > MaxErrorLen {
		t.Fatalf("after update %+v", got)
	}
	// A stale CreateRevision is refused.
	stale := a
	stale.CreateRevision--
	if err := m.UpdateStatus(ctx, stale, ReplicaStatus{State: StateFailed}); !errors.Is(err, ErrAssignmentChanged) {
		t.Fatalf("stale update: %v", err)
	}
	other := a
	other.Member = "m2"
	if err := m.UpdateStatus(ctx, other, ReplicaStatus{State: StateFailed}); err == nil {
		t.Fatal("update of another member's assignment accepted")
	}
	if err := m.UpdateStatus(ctx, a, ReplicaStatus{State: "BOGUS"}); err == nil {
		t.Fatal("bogus state accepted")
	}
}

func TestMemberLeaseLost(t *testing.T) {
	c := etcdtest.Start(t)
	const p = "/ll"
	rm := startMember(t, c, p, "a", "m1", 10)
	putJSON(t, c, ItemKey(p, "s1"), map[string]any{})
	nextLocal(t, rm.m, func(st LocalState) bool { return len(st.Assignments) == 1 })
	// Someone revokes the lease (as an expiry would): the member key and
	// assignments vanish, Done closes, Run returns ErrLeaseLost.
	if _, err := c.Revoke(context.Background(), rm.m.LeaseID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rm.m.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("Done not closed after the lease was revoked")
	}
	select {
	case err := <-rm.done:
		rm.done <- err // for cleanup
		if !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("Run returned %v, want ErrLeaseLost", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after the lease was lost")
	}
}

func TestMemberConfigErrors(t *testing.T) {
	c := etcdtest.Start(t)
	ctx := context.Background()
	for _, cfg := range []Config{
		{Prefix: "/x", Zone: "a", MemberID: "m", LeaseTTL: time.Second},
		{Client: c, Prefix: "/", Zone: "a", MemberID: "m", LeaseTTL: time.Second},
		{Client: c, Prefix: "/x", Zone: "a b", MemberID: "m", LeaseTTL: time.Second},
		{Client: c, Prefix: "/x", Zone: "a", MemberID: "", LeaseTTL: time.Second},
		{Client: c, Prefix: "/x", Zone: "a", MemberID: "m"},
		{Client: c, Prefix: "/x", Zone: "a", MemberID: "m", LeaseTTL: time.Second, Spec: MemberSpec{ItemLimit: -1}},
	} {
		if m, err := NewMember(ctx, cfg); err == nil {
			_ = m.Close()
			t.Errorf("NewMember(%+v) accepted", cfg)
		}
	}
	m, err := NewMember(ctx, Config{Client: c, Prefix: "/x", Zone: "a", MemberID: "m", LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	_, err = NewMember(ctx, Config{Client: c, Prefix: "/x", Zone: "a", MemberID: "m", LeaseTTL: time.Second})
	if !errors.Is(err, ErrMemberExists) || !strings.Contains(err.Error(), "/x/members/a/m") {
		t.Fatalf("duplicate member: %v", err)
	}
	// Closing revokes: the id is free again.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m2, err := NewMember(ctx, Config{Client: c, Prefix: "/x", Zone: "a", MemberID: "m", LeaseTTL: time.Second})
	if err != nil {
		t.Fatalf("after close: %v", err)
	}
	_ = m2.Close()
}

// TestMemberReclaimsPreviousIncarnation: a key held by the same Instance
// (this data directory's previous process, killed before its lease expired)
// is reclaimed at once: the old lease is revoked, so the old session ends.
// A different Instance is refused, naming the holder.
func TestMemberReclaimsPreviousIncarnation(t *testing.T) {
	c := etcdtest.Start(t)
	ctx := t.Context()
	cfg := Config{Client: c, Prefix: "/r", Zone: "a", MemberID: "m", LeaseTTL: 3 * time.Second,
		Spec: MemberSpec{Endpoint: "http://old:8080", Instance: "i1"}}
	old, err := NewMember(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	cfg.Spec.Endpoint = "http://new:8080"
	m, err := NewMember(ctx, cfg)
	if err != nil {
		t.Fatalf("same instance: %v", err)
	}
	defer m.Close()
	select {
	case <-old.Done():
	case <-time.After(30 * time.Second): // a bound: the revoke ends it at once
		t.Fatal("the previous incarnation's session did not end")
	}
	other := cfg
	other.Spec = MemberSpec{Endpoint: "http://other:8080", Instance: "i2"}
	_, err = NewMember(ctx, other)
	if !errors.Is(err, ErrMemberExists) || !strings.Contains(err.Error(), "endpoint http://new:8080") {
		t.Fatalf("another instance: %v; want ErrMemberExists naming the holder's endpoint", err)
	}
	none := cfg
	none.Spec = MemberSpec{Endpoint: "http://anon:8080"}
	if _, err := NewMember(ctx, none); !errors.Is(err, ErrMemberExists) {
		t.Fatalf("no instance: %v; want ErrMemberExists", err)
	}
}

// TestDeposedLeaderWritesFail: a converge txn planned by a leader whose
// member key changed since (it was deposed and, e.g., re-registered) fails
// its compare and writes nothing.
func TestDeposedLeaderWritesFail(t *testing.T) {
	c := etcdtest.Start(t)
	const p = "/dl"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m1, err := NewMember(ctx, Config{Client: c, Prefix: p, Zone: "a", MemberID: "m1", LeaseTTL: 10 * time.Second, Spec: MemberSpec{ItemLimit: 5}})
	if err != nil {
		t.Fatal(err)
	}
	defer m1.Close()
	putJSON(t, c, ItemKey(p, "s1"), map[string]any{})
	ks := NewKeySpace(c, p, nil, nil)
	if err := ks.Load(ctx); err != nil {
		t.Fatal(err)
	}
	snap := ks.Snapshot()
	if snap.Leader != "a/m1" {
		t.Fatalf("leader %q", snap.Leader)
	}
	plan := planConverge(snap, p)
	if len(plan.groups) != 1 || plan.groups[0].adds != 1 {
		t.Fatalf("plan %+v", plan.groups)
	}
	me, _ := ks.Member("a", "m1")
	txns := batchGroups(plan.groups, clientv3.Compare(clientv3.ModRevision(m1.Key()), "=", me.ModRevision))
	// The leader's key changes (here: it marks itself exiting).
	if err := m1.SetExiting(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Txn(ctx).If(txns[0].cmps...).Then(txns[0].ops...).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded {
		t.Fatal("deposed leader's txn succeeded")
	}
	got, err := c.Get(ctx, assignPrefix(p), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || got.Count != 0 {
		t.Fatalf("assignments written: %v %v", got.Count, err)
	}
}

var _ sync.Mutex
