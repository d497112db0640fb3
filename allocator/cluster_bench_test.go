package allocator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/internal/benchround"
	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/consumerd/consumerd/internal/waitfor"
)

// BenchmarkCluster simulates a cluster at scale on one real etcd: members
// that run the real Member (lease, keyspace mirror, leader's schedule and
// converge) with a stub replica that reports every assignment STANDBY (slot
// 0: PRIMARY) as soon as it sees it — no RocksDB, no WAL. Shards have two
// hot standbys (3 replicas). Each round seeds a placed cluster (see seed),
// then one member joins, then one member (not the leader) dies; each phase
// ends when every shard has its replicas consistent and the leader is idle
// at etcd's latest revision. Figures per phase: seconds, replicas moved
// (assignment keys created), etcd transactions per move (the leader's
// converge txns and the stubs' status updates) and the watch traffic per
// move (bytes of every event under the root, times the members watching
// it). All members share the machine's cores here; in a cluster each has
// its own, so the seconds are an upper bound.
//
// CONSUMERD_BENCH_CLUSTER_SHARDS and _MEMBERS change the size (defaults
// 10,000 and 50).
func BenchmarkCluster(b *testing.B) {
	if b.N > 1 {
		b.Skip("measures once; run with -benchtime 1x")
	}
	shards := envInt(b, "CONSUMERD_BENCH_CLUSTER_SHARDS", 10_000)
	members := envInt(b, "CONSUMERD_BENCH_CLUSTER_MEMBERS", 50)
	benchround.Run(b, benchround.Spec{
		Name:     "allocator.cluster",
		Params:   fmt.Sprintf("shards=%d members=%d replicas=3", shards, members),
		Rounds:   3,
		Headline: []string{"join_s", "loss_s"},
	}, func(int) []benchround.Figure {
		scope := benchround.NewScope(b)
		defer scope.Close()
		return clusterRound(scope, shards, members)
	})
}

func envInt(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// clusterSim's phases are measured by one watcher of the whole root.
type clusterSim struct {
	tb       testing.TB
	eps      []string
	prefix   string
	shards   int
	nMembers int
	ctx      context.Context
	members  []*stubMember
	updates  atomic.Int64 // status updates the stubs wrote
	events   atomic.Int64 // events under the root, as one watcher saw them
	bytes    atomic.Int64 // their keys' and values' bytes
	creates  atomic.Int64 // assignment keys created
	seen     atomic.Int64 // the counting watcher's revision
	// assigned and consistent count the assignment keys at seen.
	assigned, consistent atomic.Int64
}

// stubMember is a Member with a stub replica: it reports each of its
// assignments consistent as soon as it sees it.
type stubMember struct {
	m      *Member
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func clusterRound(tb testing.TB, shards, nMembers int) []benchround.Figure {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := &clusterSim{tb: tb, eps: etcdtest.StartServer(tb), prefix: "/sim", shards: shards, nMembers: nMembers, ctx: ctx}
	defer c.stop()
	c.watch()
	for i := 0; i < nMembers; i++ {
		c.addMember(i)
	}
	var figs []benchround.Figure
	figs = append(figs, c.phase("seed", c.seed)[0]) // its seconds only: the rest is the seed's writes
	figs = append(figs, c.phase("join", func() { c.addMember(nMembers) })...)
	figs = append(figs, c.phase("loss", func() { c.kill(nMembers / 2) })...)
	return figs
}

// phase runs act, waits until the cluster converged, and returns the
// phase's figures.
func (c *clusterSim) phase(name string, act func()) []benchround.Figure {
	leader := c.members[0].m
	txns0, upd0, ev0, by0, cr0 := leader.conv.txns.Load(), c.updates.Load(), c.events.Load(), c.bytes.Load(), c.creates.Load()
	rounds0, conflicts0 := float64(leader.conv.rounds.Load()), float64(leader.conv.conflictTxns.Load())
	start := time.Now()
	act()
	c.waitConverged(name)
	secs := time.Since(start).Seconds()
	moves := c.creates.Load() - cr0
	perMove := func(v int64) float64 {
		if moves == 0 {
			return 0
		}
		return float64(v) / float64(moves)
	}
	watching := int64(len(c.live()))
	return []benchround.Figure{
		benchround.F(name+"_s", secs, 2),
		benchround.F(name+"_moves", float64(moves), 0),
		benchround.F(name+"_rounds", float64(leader.conv.rounds.Load())-rounds0, 0),
		benchround.F(name+"_leader_txns", float64(leader.conv.txns.Load()-txns0), 0),
		benchround.F(name+"_conflicts", float64(leader.conv.conflictTxns.Load())-conflicts0, 0),
		benchround.F(name+"_etcd_txns_per_move", perMove(leader.conv.txns.Load()-txns0+c.updates.Load()-upd0), 2),
		benchround.F(name+"_events_per_move", perMove(c.events.Load()-ev0), 2),
		benchround.F(name+"_watch_kb_per_move", perMove((c.bytes.Load()-by0)*watching)/1024, 1),
	}
}

func (c *clusterSim) live() []*stubMember {
	var out []*stubMember
	for _, s := range c.members {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// watch counts every event under the root until the round ends, and keeps
// the assignments' states: the convergence check reads them instead of
// loading 30,000 keys from etcd at every poll.
func (c *clusterSim) watch() {
	cli := etcdtest.NewClient(c.tb, c.eps)
	ctx, cancel := context.WithCancel(c.ctx)
	done := make(chan struct{})
	c.tb.Cleanup(func() { cancel(); <-done })
	wch := cli.Watch(ctx, c.prefix+"/", clientv3.WithPrefix())
	consistent := map[string]bool{} // by assignment key
	go func() {
		defer close(done)
		for resp := range wch {
			for _, ev := range resp.Events {
				c.events.Add(1)
				c.bytes.Add(int64(len(ev.Kv.Key) + len(ev.Kv.Value)))
				key := string(ev.Kv.Key)
				if !strings.HasPrefix(key, assignPrefix(c.prefix)) {
					continue
				}
				if ev.Type == mvccpb.DELETE {
					delete(consistent, key)
					continue
				}
				if ev.Kv.Version == 1 {
					c.creates.Add(1)
				}
				st, err := DecodeReplicaStatus(ev.Kv.Value)
				consistent[key] = err == nil && st.State.Consistent()
			}
			n := 0
			for _, ok := range consistent {
				if ok {
					n++
				}
			}
			c.assigned.Store(int64(len(consistent)))
			c.consistent.Store(int64(n))
			c.seen.Store(resp.Header.Revision)
		}
	}()
}

func (c *clusterSim) addMember(i int) {
	limit := 2*3*c.shards/c.nMembers + 10 // room to move
	m, err := NewMember(c.ctx, Config{
		Client: etcdtest.NewClient(c.tb, c.eps), Prefix: c.prefix,
		Zone: fmt.Sprintf("z%d", i%3), MemberID: fmt.Sprintf("m%03d", i), LeaseTTL: 5 * time.Minute, // losses here are revocations, never expiry
		Spec:   MemberSpec{ItemLimit: limit},
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Error}),
	})
	if err != nil {
		c.tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	s := &stubMember{m: m, cancel: cancel}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		if err := m.Run(ctx); err != nil && ctx.Err() == nil {
			c.tb.Errorf("member %s/%s stopped: %v (the machine too busy to keep its lease?)", m.Zone(), m.ID(), err)
		}
	}()
	go func() {
		defer s.wg.Done()
		c.stubReplica(ctx, m)
	}()
	for len(c.members) <= i {
		c.members = append(c.members, nil)
	}
	c.members[i] = s
}

// stubReplica reports each new assignment of m consistent at once: STANDBY,
// or PRIMARY in slot 0 (a promoted standby too). Replicas report on their
// own, as the shard layer's do: up to 16 updates of a member at a time.
func (c *clusterSim) stubReplica(ctx context.Context, m *Member) {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	defer wg.Wait()
	// reported holds what was written to each assignment (by item, slot
	// and the key's CreateRevision): a state arriving before the mirror reflects the
	// write is not written again, as the shard layer reports each state
	// once.
	reported := map[string]ReplicaState{}
	for {
		var st LocalState
		select {
		case <-ctx.Done():
			return
		case st = <-m.Local():
		}
		for _, a := range st.Assignments {
			want := StateStandby
			if a.Slot == 0 {
				want = StatePrimary
			}
			if a.Status.State == want || a.Status.State == StateFailed || reported[reportKey(a)] == want {
				continue
			}
			reported[reportKey(a)] = want
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				err := m.UpdateStatus(ctx, a, ReplicaStatus{State: want})
				if err == nil {
					c.updates.Add(1)
				} else if ctx.Err() == nil && !errors.Is(err, ErrAssignmentChanged) {
					c.tb.Errorf("stub replica of %s: %v", a.Item, err)
				}
			}()
		}
		wg.Wait() // the next state reflects these updates
	}
}

func reportKey(a Assignment) string {
	return fmt.Sprintf("%s/%d@%d", a.Item, a.Slot, a.CreateRevision)
}

func (c *clusterSim) kill(i int) {
	s := c.members[i]
	s.cancel()
	s.wg.Wait()
	if err := s.m.Close(); err != nil {
		c.tb.Fatal(err)
	}
	c.members[i] = nil
}

func (c *clusterSim) stop() {
	for i, s := range c.members {
		if s != nil {
			s.cancel()
			s.wg.Wait()
			_ = s.m.Close()
			c.members[i] = nil
		}
	}
}

// seed writes every shard with its replicas already placed (by Solve, as
// the leader would) and consistent, under the members' leases: the state
// of a cluster that has been running, reached in seconds instead of the
// minutes 30,000 replicas take to report in. Each shard's item and
// assignments go in one transaction, so the leader never sees a shard
// without its replicas.
func (c *clusterSim) seed() {
	cli := etcdtest.NewClient(c.tb, c.eps)
	live := c.live()
	sort.Slice(live, func(i, j int) bool {
		a, b := live[i].m, live[j].m
		return a.Zone() < b.Zone() || a.Zone() == b.Zone() && a.ID() < b.ID()
	})
	members := make([]SchedMember, len(live))
	for i, s := range live {
		members[i] = SchedMember{Zone: s.m.Zone(), ID: s.m.ID(), Limit: 2*3*c.shards/c.nMembers + 10}
	}
	items := make([]SchedItem, c.shards)
	for i := range items {
		items[i] = SchedItem{ID: fmt.Sprintf("shard-%05d", i), Replication: 3}
	}
	sol := Solve(members, items)
	var ops []clientv3.Op
	flush := func() {
		if _, err := cli.Txn(c.ctx).Then(ops...).Commit(); err != nil {
			c.tb.Fatal(err)
		}
		ops = ops[:0]
	}
	for i, it := range items {
		ops = append(ops, clientv3.OpPut(ItemKey(c.prefix, it.ID), `{"hot_standbys":2}`))
		for k, mi := range sol.Desired[i] {
			s := live[mi]
			st := `{"state":"STANDBY"}`
			if k == 0 {
				st = `{"state":"PRIMARY"}`
			}
			a := Assignment{Item: it.ID, Zone: s.m.Zone(), Member: s.m.ID(), Slot: k}
			ops = append(ops, clientv3.OpPut(AssignmentKey(c.prefix, a), st, clientv3.WithLease(s.m.LeaseID())))
		}
		if len(ops) > maxTxnOps-4 {
			flush()
		}
	}
	if len(ops) > 0 {
		flush()
	}
}

// waitConverged waits until every shard has 3 consistent replicas (as the
// counting watcher saw them) and the leader found nothing to do, both at
// etcd's latest revision. Polled every 50 ms (the seconds' resolution).
func (c *clusterSim) waitConverged(phase string) {
	cli := etcdtest.NewClient(c.tb, c.eps)
	leader := c.members[0].m
	deadline, _ := c.ctx.Deadline()
	want := int64(3 * c.shards)
	waitfor.Every(c.tb, 50*time.Millisecond, time.Until(deadline), phase+": the cluster to converge", func() (bool, string) {
		if c.tb.Failed() { // a member stopped: it would never converge
			c.tb.FailNow()
		}
		resp, err := cli.Get(c.ctx, c.prefix+"/", clientv3.WithCountOnly()) // etcd's revision
		if err != nil {
			c.tb.Fatal(err)
		}
		rev, seen, idle := resp.Header.Revision, c.seen.Load(), leader.idleRev.Load()
		assigned, consistent := c.assigned.Load(), c.consistent.Load()
		return seen >= rev && idle >= rev && assigned == want && consistent == want,
			fmt.Sprintf("%d assignments, %d consistent, of %d, at revision %d; the leader idle at %d; etcd at %d",
				assigned, consistent, want, seen, idle, rev)
	})
}
