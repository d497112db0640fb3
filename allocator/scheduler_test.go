package allocator

import (
	"math/rand"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestSolveRandomProperties(t *testing.T) {
	for seed := int64(0); seed < 400; seed++ {
		r := rand.New(rand.NewSource(seed))
		members, items := randomCluster(r, seed%2 == 0)
		sol := Solve(members, items)
		if err := checkSolution(members, items, sol); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		// Deterministic.
		if again := Solve(members, items); !reflect.DeepEqual(again.Desired, sol.Desired) {
			t.Fatalf("seed %d: not deterministic", seed)
		}
		// Stable: solving again from the solution (all consistent) keeps it.
		cur := withCurrent(items, sol, StateStandby)
		sol2 := Solve(members, cur)
		if err := checkSolution(members, cur, sol2); err != nil {
			t.Fatalf("seed %d (resolve): %v", seed, err)
		}
		for i := range items {
			if !reflect.DeepEqual(sol.Desired[i], sol2.Desired[i]) {
				t.Fatalf("seed %d: item %d not stable: %v then %v", seed, i, sol.Desired[i], sol2.Desired[i])
			}
		}
	}
}

func TestSolveTable(t *testing.T) {
	type rep = SchedReplica
	ms := func(spec ...string) []SchedMember { // "zone/id/limit[/x]"
		var out []SchedMember
		for _, s := range spec {
			var z, id string
			var lim int
			var x string
			parts := strings.Split(s, "/")
			z, id = parts[0], parts[1]
			lim, _ = strconv.Atoi(parts[2])
			if len(parts) > 3 {
				x = parts[3]
			}
			out = append(out, SchedMember{Zone: z, ID: id, Limit: lim, Exiting: x == "x"})
		}
		return out
	}
	cases := []struct {
		name    string
		members []SchedMember
		items   []SchedItem
		want    [][]int32
		short   int
	}{{
		name:    "fresh: spread over zones, balanced",
		members: ms("a/m0/10", "a/m1/10", "b/m2/10", "b/m3/10"),
		items:   []SchedItem{{ID: "s1", Replication: 2}, {ID: "s2", Replication: 2}},
		want:    [][]int32{{0, 2}, {3, 1}},
	}, {
		name:    "current primary stays primary",
		members: ms("a/m0/10", "a/m1/10"),
		items:   []SchedItem{{ID: "s1", Replication: 2, Current: []rep{{Member: 1, Slot: 0, State: StatePrimary}, {Member: 0, Slot: 1, State: StateStandby}}}},
		want:    [][]int32{{1, 0}},
	}, {
		name:    "primary on an exiting member: the consistent standby takes over",
		members: ms("a/m0/10/x", "a/m1/10", "a/m2/10"),
		items: []SchedItem{{ID: "s1", Replication: 2, Current: []rep{
			{Member: 0, Slot: 0, State: StatePrimary}, {Member: 2, Slot: 1, State: StateBackfill}, {Member: 1, Slot: 2, State: StateStandby}}}},
		want: [][]int32{{1, 2}},
	}, {
		name:    "exiting members get nothing",
		members: ms("a/m0/10/x", "a/m1/10"),
		items:   []SchedItem{{ID: "s1", Replication: 2}},
		want:    [][]int32{{1}},
		short:   1,
	}, {
		name:    "limits cap placement; shortfall reported",
		members: ms("a/m0/1", "a/m1/1"),
		items:   []SchedItem{{ID: "s1", Replication: 2}, {ID: "s2", Replication: 1}},
		want:    [][]int32{{0, 1}, {}},
		short:   1,
	}, {
		name:    "failed replica pinned even on a member over its limit",
		members: ms("a/m0/0", "a/m1/5"),
		items:   []SchedItem{{ID: "s1", Replication: 2, Current: []rep{{Member: 1, Slot: 0, State: StatePrimary}, {Member: 0, Slot: 1, State: StateFailed}}}},
		want:    [][]int32{{1, 0}},
	}, {
		name:    "no primary and a FAILED standby: a new replica becomes primary",
		members: ms("a/m0/5", "a/m1/5"),
		items:   []SchedItem{{ID: "s1", Replication: 2, Current: []rep{{Member: 0, Slot: 1, State: StateFailed}}}},
		want:    [][]int32{{1, 0}},
	}, {
		name:    "new items: primaries spread over members",
		members: ms("a/m0/5", "b/m1/5"),
		items:   []SchedItem{{ID: "s1", Replication: 2}, {ID: "s2", Replication: 2}},
		want:    [][]int32{{0, 1}, {1, 0}},
	}, {
		name:    "zone spread fixed when a zone appears",
		members: ms("a/m0/10", "a/m1/10", "b/m2/10"),
		items: []SchedItem{{ID: "s1", Replication: 2, Current: []rep{
			{Member: 0, Slot: 0, State: StatePrimary}, {Member: 1, Slot: 1, State: StateStandby}}}},
		want: [][]int32{{0, 2}},
	}, {
		name:    "replication above member count",
		members: ms("a/m0/10", "b/m1/10"),
		items:   []SchedItem{{ID: "s1", Replication: 3}},
		want:    [][]int32{{0, 1}},
		short:   1,
	}, {
		name:    "bad input: unknown member index and negative replication ignored",
		members: ms("a/m0/10"),
		items:   []SchedItem{{ID: "s1", Replication: -1, Current: []rep{{Member: 7, Slot: 0, State: StatePrimary}}}, {ID: "s2", Replication: 1, Current: []rep{{Member: -1, Slot: 0}}}},
		want:    [][]int32{{}, {0}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sol := Solve(tc.members, tc.items)
			for i := range tc.want {
				if len(tc.want[i]) == 0 && len(sol.Desired[i]) == 0 {
					continue
				}
				if !reflect.DeepEqual(sol.Desired[i], tc.want[i]) {
					t.Errorf("item %d: got %v want %v", i, sol.Desired[i], tc.want[i])
				}
			}
			if len(sol.Shortfall) != tc.short {
				t.Errorf("shortfall %+v, want %d items", sol.Shortfall, tc.short)
			}
			if err := checkSolution(tc.members, tc.items, sol); err != nil {
				t.Error(err)
			}
		})
	}
}

// FuzzScheduler checks the invariants (checkSolution) and stability on random
// clusters derived from the fuzzed seed.
func FuzzScheduler(f *testing.F) {
	for _, s := range []int64{0, 1, 2, 3, 42, 168, 1234, 99999} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, seed int64, current bool) {
		r := rand.New(rand.NewSource(seed))
		members, items := randomCluster(r, current)
		sol := Solve(members, items)
		if err := checkSolution(members, items, sol); err != nil {
			t.Fatal(err)
		}
		cur := withCurrent(items, sol, StateStandby)
		sol2 := Solve(members, cur)
		if !reflect.DeepEqual(sol.Desired, sol2.Desired) {
			t.Fatal("not stable when re-solved from its own result")
		}
	})
}
