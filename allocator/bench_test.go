package allocator

import (
	"fmt"
	"math/rand"
	"testing"
	"time"
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
// over 1000 members in 3 zones. The figure is the wall time of Solve.
func BenchmarkSolve(b *testing.B) {
	if b.N > 1 {
		b.Skip("measures once; run with -benchtime 1x")
	}
	members, items := benchCluster(1000, 3, 1_000_000, 3, 10_000)
	start := time.Now()
	sol := Solve(members, items)
	secs := time.Since(start).Seconds()
	if len(sol.Shortfall) != 0 || sol.Slots != 3_000_000 {
		b.Fatalf("placed %d slots, %d items short", sol.Slots, len(sol.Shortfall))
	}
	if err := quickCheck(members, items, sol); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("BENCH allocator.solve items=%d replication=%d members=%d zones=%d seconds=%.3f\n",
		len(items), 3, len(members), 3, secs)
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
func BenchmarkChurnMemberLoss(b *testing.B) {
	if b.N > 1 {
		b.Skip("measures once; run with -benchtime 1x")
	}
	members, items := benchCluster(100, 3, 10_000, 2, 1000)
	sol := Solve(members, items)
	dead := 37
	held := sol.Load[dead]
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
	moves := addedPlacements(prev, next)
	fmt.Printf("BENCH allocator.churn scenario=member-loss moves=%d held=%d ratio=%.3f\n",
		moves, held, float64(moves)/float64(held))
}

// BenchmarkChurnReplicationChange: 100 members in 3 zones, 10,000 items with
// replication 2. In each of 100 steps a random run of consecutive items
// (1..500 long) gets a new random replication in 1..4, and the cluster is
// solved again from the previous desired assignments (all consistent).
// moves = replica placements added over all steps; held = the replicas the
// increases require (sum over changed items of max(0, new-old)), the minimum
// any scheduler must add. Decreases add nothing required, so any rebalancing
// they trigger shows up as extra moves.
func BenchmarkChurnReplicationChange(b *testing.B) {
	if b.N > 1 {
		b.Skip("measures once; run with -benchtime 1x")
	}
	r := rand.New(rand.NewSource(1))
	members, items := benchCluster(100, 3, 10_000, 2, 1000)
	sol := Solve(members, items)
	moves, held := 0, 0
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
	fmt.Printf("BENCH allocator.churn scenario=replication-change moves=%d held=%d ratio=%.3f\n",
		moves, held, float64(moves)/float64(held))
}
