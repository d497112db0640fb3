package allocator

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"
)

// loaded returns three members of one zone and items with two replicas
// each, all consistent: item i is primary on prim[i] with a standby on
// stby[i], and costs load[i].
func loaded(prim, stby []int, load []int64) ([]SchedMember, []SchedItem) {
	ms := []SchedMember{{Zone: "a", ID: "m0", Limit: 20}, {Zone: "a", ID: "m1", Limit: 20}, {Zone: "a", ID: "m2", Limit: 20}}
	var items []SchedItem
	for i := range prim {
		items = append(items, SchedItem{ID: fmt.Sprintf("s%d", i), Replication: 2, Load: load[i], Current: []SchedReplica{
			{Member: prim[i], Slot: 0, State: StatePrimary}, {Member: stby[i], Slot: 1, State: StateStandby}}})
	}
	return ms, items
}

func primaries(sol *Solution) []int32 {
	out := make([]int32, len(sol.Desired))
	for i, d := range sol.Desired {
		out[i] = d[0]
	}
	return out
}

func TestBalanceLoad(t *testing.T) {
	cases := []struct {
		name       string
		prim, stby []int
		load       []int64
		edit       func([]SchedMember, []SchedItem)
		want       []int32 // primaries after
		moves      int
		unsettled  int
	}{{
		// s0 goes to m1, which then hands s2 on to m2: 0.8/0.8/0.2 cores.
		name: "hot primaries on one member: hand-overs even them out",
		prim: []int{0, 0, 1, 2}, stby: []int{1, 2, 2, 0},
		load: []int64{800_000, 800_000, 100_000, 100_000},
		want: []int32{1, 0, 2, 2}, moves: 2,
	}, {
		name: "no load known: primaries stay (count placement)",
		prim: []int{0, 0, 1, 2}, stby: []int{1, 2, 2, 0},
		load: []int64{0, 0, 0, 0},
		want: []int32{0, 0, 1, 2},
	}, {
		name: "below the trigger: nothing moves",
		prim: []int{0, 1, 2, 0}, stby: []int{1, 2, 0, 2},
		load: []int64{400_000, 500_000, 500_000, 150_000}, // m0 1.12× the mean
		want: []int32{0, 1, 2, 0},
	}, {
		name: "imbalance of a few percent of a core: nothing moves",
		prim: []int{0, 0, 1, 2}, stby: []int{1, 2, 2, 0},
		load: []int64{20_000, 20_000, 1_000, 1_000},
		want: []int32{0, 0, 1, 2},
	}, {
		name: "an unsettled item holds every move back",
		prim: []int{0, 0, 1, 2}, stby: []int{1, 2, 2, 0},
		load: []int64{800_000, 800_000, 100_000, 100_000},
		edit: func(_ []SchedMember, it []SchedItem) { it[3].LoadUnsettled = true },
		want: []int32{0, 0, 1, 2}, unsettled: 1,
	}, {
		name: "a primary that took over lately is not moved; others are",
		prim: []int{0, 0, 1, 2}, stby: []int{1, 2, 2, 0},
		load: []int64{800_000, 800_000, 100_000, 100_000},
		edit: func(_ []SchedMember, it []SchedItem) { it[0].LoadYoung = true },
		// s1 to m2 (s0 stays on m0): 0.8/0.1/0.9 cores.
		want: []int32{0, 2, 1, 2}, moves: 1,
	}, {
		name: "a standby still catching up does not take over",
		prim: []int{0, 0, 1, 2}, stby: []int{1, 2, 2, 0},
		load: []int64{800_000, 800_000, 100_000, 100_000},
		edit: func(_ []SchedMember, it []SchedItem) {
			it[0].Current[1].State = StateBackfill
			it[1].Current[1].State = StateIdle
		},
		want: []int32{0, 0, 1, 2},
	}, {
		name: "no hand-over to an exiting member",
		prim: []int{0, 0, 1, 2}, stby: []int{1, 1, 2, 0},
		load: []int64{800_000, 800_000, 100_000, 100_000},
		edit: func(ms []SchedMember, _ []SchedItem) { ms[1].Exiting = true },
		// m1's replicas are re-placed (s2's standby on m2 takes over);
		// the new ones are not consistent yet, so the hot pair stays.
		want: []int32{0, 0, 2, 2},
	}, {
		name: "a single hot item: moving it only moves the hot spot",
		prim: []int{0, 1, 2}, stby: []int{1, 2, 0},
		load: []int64{900_000, 50_000, 50_000},
		want: []int32{0, 1, 2},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ms, items := loaded(tc.prim, tc.stby, tc.load)
			if tc.edit != nil {
				tc.edit(ms, items)
			}
			sol := Solve(ms, items)
			if err := checkSolution(ms, items, sol); err != nil {
				t.Fatal(err)
			}
			if got := primaries(sol); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("primaries %v, want %v", got, tc.want)
			}
			if sol.LoadMoves != tc.moves || sol.LoadUnsettled != tc.unsettled {
				t.Errorf("moves %d unsettled %d, want %d and %d", sol.LoadMoves, sol.LoadUnsettled, tc.moves, tc.unsettled)
			}
		})
	}
}

// TestBalanceLoadRandom checks, on random clusters with random loads, that
// the load phase keeps every other invariant, never raises the busiest
// member's primary load, is deterministic, and is stable: solved again
// from its own result with the same loads, nothing moves.
func TestBalanceLoadRandom(t *testing.T) {
	moved := 0
	for seed := int64(0); seed < 300; seed++ {
		r := rand.New(rand.NewSource(seed))
		members, items := randomCluster(r, false)
		// Start from a settled placement: every replica consistent.
		items = withCurrent(items, Solve(members, items), StateStandby)
		for i := range items {
			if r.Intn(10) == 0 {
				items[i].Load = int64(200_000 + r.Intn(800_000)) // hot
			} else {
				items[i].Load = int64(r.Intn(50_000))
			}
		}
		base := Solve(members, withoutLoad(items))
		sol := Solve(members, items)
		if err := checkSolution(members, items, sol); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if again := Solve(members, items); !reflect.DeepEqual(again.Desired, sol.Desired) {
			t.Fatalf("seed %d: not deterministic", seed)
		}
		if b, a := maxPrimaryLoad(items, base), maxPrimaryLoad(items, sol); a > b {
			t.Fatalf("seed %d: busiest member's primary load rose from %d to %d", seed, b, a)
		}
		for i := range items {
			if !sameSet(base.Desired[i], sol.Desired[i]) {
				t.Fatalf("seed %d: item %d: replicas %v, without loads %v (only primaries may change)", seed, i, sol.Desired[i], base.Desired[i])
			}
		}
		moved += sol.LoadMoves
		next := withCurrent(items, sol, StateStandby)
		for i := range next {
			next[i].Load = items[i].Load
		}
		if sol2 := Solve(members, next); sol2.LoadMoves != 0 || !reflect.DeepEqual(sol2.Desired, sol.Desired) {
			t.Fatalf("seed %d: re-solved from its own result, %d more moves", seed, sol2.LoadMoves)
		}
	}
	if moved == 0 {
		t.Fatal("no random cluster moved a primary: the test checks nothing")
	}
}

func withoutLoad(items []SchedItem) []SchedItem {
	out := append([]SchedItem(nil), items...)
	for i := range out {
		out[i].Load = 0
	}
	return out
}

func maxPrimaryLoad(items []SchedItem, sol *Solution) int64 {
	pl := map[int32]int64{}
	var hi int64
	for i, d := range sol.Desired {
		if len(d) == 0 {
			continue
		}
		pl[d[0]] += items[i].Load
		hi = max(hi, pl[d[0]])
	}
	return hi
}

func sameSet(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	in := map[int32]bool{}
	for _, x := range a {
		in[x] = true
	}
	for _, x := range b {
		if !in[x] {
			return false
		}
	}
	return true
}
