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

var _ = rand.New
