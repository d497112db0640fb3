package allocator

import (
	"math/rand"
	"reflect"
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
