package allocator

import (
	"context"
	"fmt"
	"sync"

	"math/rand"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/benchround"
	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func benchCluster(nMembers, nZones, nItems, replication, limit int) ([]SchedMember, []SchedItem) {
	members := make([]SchedMember, nMembers)
	for m := range members {
		members[m] = SchedMember{Zone: fmt.Sprintf("zone-%d", m%nZones), ID: fmt.Sprintf("member-%04d", m), Limit: limit}
	}
	items := make([]SchedItem, nItems)
	for i := range items {
		items[i] = SchedItem{ID: fmt.Sprintf("item-%07d", i), Replication: replication}
	}
	return members, items
}

// BenchmarkSolve: one solve from scratch of 1,000,000 items × replication 3
// over 1000 members in 3 zones. The figure is the wall time of Solve, the
// median over rounds (each its own solve from scratch).
func BenchmarkSolve(b *testing.B) {
	if b.N > 1 {
		b.Skip("measures once; run with -benchtime 1x")
	}
	const nItems, nMembers = 1_000_000, 1000
	benchround.Run(b, benchround.Spec{
		Name:     "allocator.solve",
		Params:   fmt.Sprintf("items=%d replication=%d members=%d zones=%d", nItems, 3, nMembers, 3),
		Rounds:   5,
		Headline: []string{"seconds"},
	}, func(int) []benchround.Figure {
		members, items := benchCluster(nMembers, 3, nItems, 3, 10_000)
		start := time.Now()
		sol := Solve(members, items)
		secs := time.Since(start).Seconds()
		if len(sol.Shortfall) != 0 || sol.Slots != 3_000_000 {
			b.Fatalf("placed %d slots, %d items short", sol.Slots, len(sol.Shortfall))
		}
		if err := quickCheck(members, items, sol); err != nil {
			b.Fatal(err)
		}
		return []benchround.Figure{benchround.F("seconds", secs, 3)}
	})
}

// quickCheck is a linear-time subset of checkSolution for big inputs:
// limits, duplicates, zones distinct when replication ≤ zones, load spread
// within each zone.
func quickCheck(members []SchedMember, items []SchedItem, sol *Solution) error {
	load := make([]int, len(members))
	for i, d := range sol.Desired {
		seenZone := map[string]bool{}
		for k, m := range d {
			for _, o := range d[:k] {
				if o == m {
					return fmt.Errorf("item %d: duplicate member %d", i, m)
				}
			}
			z := members[m].Zone
			if seenZone[z] && len(d) <= 3 {
				return fmt.Errorf("item %d: zone %s twice", i, z)
			}
			seenZone[z] = true
			load[m]++
		}
	}
	lo, hi := map[string]int{}, map[string]int{}
	for m, l := range load {
		if l > members[m].Limit {
			return fmt.Errorf("member %d over limit", m)
		}
		z := members[m].Zone
		if v, ok := lo[z]; !ok || l < v {
			lo[z] = l
		}
		if l > hi[z] {
			hi[z] = l
		}
	}
	for z := range lo {
		if hi[z]-lo[z] > 1 {
			return fmt.Errorf("zone %s: loads from %d to %d", z, lo[z], hi[z])
		}
	}
	return nil
}

// addedPlacements counts (item, member) pairs in next that prev lacks.
func addedPlacements(prev, next *Solution) int {
	n := 0
	for i, d := range next.Desired {
	outer:
		for _, m := range d {
			if i < len(prev.Desired) {
				for _, o := range prev.Desired[i] {
					if o == m {
						continue outer
					}
				}
			}
			n++
		}
	}
	return n
}

// BenchmarkChurnMemberLoss: 100 members in 3 zones, 10,000 items with
// replication 2 are placed; then one member dies (its assignments vanish with
// its lease) and the cluster is solved again from the survivors' current
// assignments. moves = replica placements added by the second solve; held =
// replicas the dead member held (the minimum any scheduler must add).
// Each round repeats the whole scenario; the figures are the medians.
func BenchmarkChurnMemberLoss(b *testing.B) {
	if b.N > 1 {
		b.Skip("measures once; run with -benchtime 1x")
	}
	benchround.Run(b, benchround.Spec{
		Name:     "allocator.churn",
		Params:   "scenario=member-loss",
		Rounds:   5,
		Headline: []string{"ratio"},
	}, func(int) []benchround.Figure {
		moves, held := churnMemberLoss(b)
		return []benchround.Figure{
			benchround.F("moves", float64(moves), 0), benchround.F("held", float64(held), 0),
			benchround.F("ratio", float64(moves)/float64(held), 3),
		}
	})
}

// churnMemberLoss is one round of BenchmarkChurnMemberLoss.
func churnMemberLoss(b *testing.B) (moves, held int) {
	members, items := benchCluster(100, 3, 10_000, 2, 1000)
	sol := Solve(members, items)
	dead := 37
	held = sol.Load[dead]
	survivors := append(append([]SchedMember(nil), members[:dead]...), members[dead+1:]...)
	remap := func(m int) int {
		if m > dead {
			return m - 1
		}
		return m
	}
	cur := make([]SchedItem, len(items))
	prev := &Solution{Desired: make([][]int32, len(items))}
	for i, it := range items {
		cur[i] = SchedItem{ID: it.ID, Replication: it.Replication}
		for k, m := range sol.Desired[i] {
			if int(m) == dead {
				continue
			}
			st := StateStandby
			if k == 0 {
				st = StatePrimary
			}
			cur[i].Current = append(cur[i].Current, SchedReplica{Member: remap(int(m)), Slot: k, State: st})
			prev.Desired[i] = append(prev.Desired[i], int32(remap(int(m))))
		}
	}
	next := Solve(survivors, cur)
	if err := checkSolution(survivors, cur, next); err != nil {
		b.Fatal(err)
	}
	return addedPlacements(prev, next), held
}

// BenchmarkChurnReplicationChange: 100 members in 3 zones, 10,000 items with
// replication 2. In each of 100 steps a random run of consecutive items
// (1..500 long) gets a new random replication in 1..4, and the cluster is
// solved again from the previous desired assignments (all consistent).
// moves = replica placements added over all steps; held = the replicas the
// increases require (sum over changed items of max(0, new-old)), the minimum
// any scheduler must add. Decreases add nothing required, so any rebalancing
// they trigger shows up as extra moves. Each round repeats the whole
// scenario (the same seed); the figures are the medians.
func BenchmarkChurnReplicationChange(b *testing.B) {
	if b.N > 1 {
		b.Skip("measures once; run with -benchtime 1x")
	}
	benchround.Run(b, benchround.Spec{
		Name:     "allocator.churn",
		Params:   "scenario=replication-change",
		Rounds:   5,
		Headline: []string{"ratio"},
	}, func(int) []benchround.Figure {
		moves, held := churnReplicationChange(b)
		return []benchround.Figure{
			benchround.F("moves", float64(moves), 0), benchround.F("held", float64(held), 0),
			benchround.F("ratio", float64(moves)/float64(held), 3),
		}
	})
}

// churnReplicationChange is one round of BenchmarkChurnReplicationChange.
func churnReplicationChange(b *testing.B) (moves, held int) {
	r := rand.New(rand.NewSource(1))
	members, items := benchCluster(100, 3, 10_000, 2, 1000)
	sol := Solve(members, items)
	for step := 0; step < 100; step++ {
		cur := withCurrent(items, sol, StateStandby)
		start := r.Intn(len(items))
		n := 1 + r.Intn(500)
		for i := start; i < start+n && i < len(items); i++ {
			nr := 1 + r.Intn(4)
			if nr > cur[i].Replication {
				held += nr - cur[i].Replication
			}
			cur[i].Replication = nr
		}
		next := Solve(members, cur)
		moves += addedPlacements(sol, next)
		items, sol = cur, next
	}
	if err := checkSolution(members, items, sol); err != nil {
		b.Fatal(err)
	}
	return moves, held
}

// BenchmarkConverge: 10 members on an embedded etcd; 10,000 items of
// replication 2 are created (in 128-op transactions) and the leader assigns
// them. seconds = from the first item write until every item has its two
// replicas and the leader is idle at the latest revision; txns = converge
// transactions the leader sent. Each round runs on a fresh etcd with fresh
// members; the figures are the medians.
func BenchmarkConverge(b *testing.B) {
	if b.N > 1 {
		b.Skip("measures once; run with -benchtime 1x")
	}
	const nItems, nMembers = 10_000, 10
	benchround.Run(b, benchround.Spec{
		Name:     "allocator.converge",
		Params:   fmt.Sprintf("items=%d members=%d", nItems, nMembers),
		Rounds:   5,
		Headline: []string{"seconds"},
	}, func(int) []benchround.Figure {
		txns, secs := converge(b, nItems, nMembers)
		return []benchround.Figure{benchround.F("txns", float64(txns), 0), benchround.F("seconds", secs, 3)}
	})
}

// converge is one round of BenchmarkConverge: it returns the leader's
// converge transactions and the seconds to converge.
func converge(b *testing.B, nItems, nMembers int) (txns int64, secs float64) {
	const prefix = "/bench"
	c := etcdtest.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	deadline, _ := ctx.Deadline()
	var members []*Member
	var wg sync.WaitGroup
	rctx, rcancel := context.WithCancel(ctx)
	defer func() {
		rcancel()
		wg.Wait()
		for _, m := range members {
			_ = m.Close()
		}
	}()
	for i := 0; i < nMembers; i++ {
		m, err := NewMember(ctx, Config{Client: c, Prefix: prefix, Zone: fmt.Sprintf("z%d", i%3),
			MemberID: fmt.Sprintf("m%02d", i), LeaseTTL: 30 * time.Second, Spec: MemberSpec{ItemLimit: 5000}, Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn})})
		if err != nil {
			b.Fatal(err)
		}
		members = append(members, m)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = m.Run(rctx)
		}()
	}
	leader := members[0] // the first announced has the lowest CreateRevision
	start := time.Now()
	var ops []clientv3.Op
	flush := func() {
		if len(ops) == 0 {
			return
		}
		if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
		ops = ops[:0]
	}
	for i := 0; i < nItems; i++ {
		ops = append(ops, clientv3.OpPut(ItemKey(prefix, fmt.Sprintf("item-%05d", i)), `{"hot_standbys":1}`))
		if len(ops) == maxTxnOps {
			flush()
		}
	}
	flush()
	// Polled every 5 ms: the interval bounds the measured seconds' resolution.
	waitfor.Every(b, 5*time.Millisecond, time.Until(deadline), "the leader to converge", func() (bool, string) {
		resp, err := c.Get(ctx, assignPrefix(prefix), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			b.Fatal(err)
		}
		idle := leader.idleRev.Load()
		return resp.Count == int64(2*nItems) && idle >= resp.Header.Revision,
			fmt.Sprintf("%d of %d assignments, the leader idle at revision %d of %d", resp.Count, 2*nItems, idle, resp.Header.Revision)
	})
	return leader.conv.txns.Load(), time.Since(start).Seconds()
}
