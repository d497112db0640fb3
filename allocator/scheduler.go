package allocator

// This file holds the scheduler's public types and Solve, which runs the
// solver's phases in order; each phase lives in its own scheduler_*.go file.

// SchedMember is one member as the scheduler sees it.
type SchedMember struct {
	Zone, ID string
	// Limit is the most replicas the member may hold.
	Limit int
	// Exiting members get nothing and lose everything they hold (their
	// replicas are re-placed; converge removes the old ones make-before-break).
	Exiting bool
}

// SchedReplica is one current assignment of an item.
type SchedReplica struct {
	// Member indexes the members slice given to Solve.
	Member int
	Slot   int
	State  ReplicaState
}

// SchedItem is one item with its desired replication and current replicas.
type SchedItem struct {
	ID          string
	Replication int
	Current     []SchedReplica
	// Load is what the item's current primary costs (its LoadReport's
	// BusyMicros); 0 when idle or not known. When no item has a load,
	// primaries are placed by count alone.
	Load int64
	// LoadUnsettled says the item has a primary whose load is not known
	// yet (its member has not reported a whole window of it): primaries
	// are not moved for load while any item is unsettled, so a move is
	// judged only once the moves before it were measured.
	LoadUnsettled bool
	// LoadYoung says its primary took over recently (it led for fewer
	// than LoadMinDwellWindows report windows): it counts, but it is not
	// moved for load.
	LoadYoung bool
}

// Solution is the scheduler's result.
type Solution struct {
	// Desired holds, per item (same index as the input), the member indices
	// of its desired replicas; Desired[i][0] is the primary.
	Desired [][]int32
	// Load is the number of desired replicas per member.
	Load []int
	// Shortfall lists items that got fewer replicas than they want, in item order.
	Shortfall []Shortfall
	// Slots is the total of desired replicas placed.
	Slots int
	// LoadMoves is the primaries moved to balance load (balanceLoad);
	// LoadUnsettled the items that kept it from running (0 when it ran).
	LoadMoves, LoadUnsettled int
}

// Shortfall is an item that could not get its desired replication.
type Shortfall struct {
	Item      int
	Want, Got int
}

// Entry flags kept per desired replica.
const (
	flagPinned     = 1 << iota // a FAILED replica: never moved or removed
	flagKept                   // an existing assignment kept
	flagConsistent             // kept and STANDBY/PRIMARY
	flagPrimary                // kept and currently slot 0
)

// Solve computes desired assignments. It is pure and deterministic: the same
// input gives the same output, and it does no I/O.
//
// Invariants of the result:
//   - no member holds more than its Limit (except FAILED replicas it already
//     held, which are pinned until an operator unassigns them);
//   - no item has two replicas on one member; exiting members hold nothing;
//   - an item's replicas are spread over zones as evenly as the zones'
//     capacity allows (per-zone counts differ by at most one when possible);
//   - each item gets Replication replicas when capacity allows (else it is
//     listed in Shortfall);
//   - current replicas are kept where the rules above allow, and the current
//     primary stays primary while kept; when it must go, a kept consistent
//     standby becomes primary;
//   - load is balanced: no replica could move to a member with at least two
//     fewer replicas without breaking one of the rules above (members with
//     limits fill up to their limit; others share the rest: water-filling).
//
// Phases: keep and trim current replicas; shed replicas over member limits;
// fill missing replicas greedily (least-loaded member of the least-used zone,
// by per-zone heaps; zone ties broken by a hash of the item so items' zone
// combinations are diverse); even out zone spread; rebalance from the most
// loaded members (moving replicas placed by this solve first, then standbys,
// then primaries); retry short items, with one-step augmenting moves; order
// each item's replicas (kept primary first, else a kept consistent standby,
// else the new replica on the member with the fewest primaries); when items
// report loads, hand primaries over to consistent standbys so the busiest
// member's primary load comes near the mean (balanceLoad, with hysteresis).
// Cost is about O(replicas × log members) for the fill plus linear
// rebalance scans.
func Solve(members []SchedMember, items []SchedItem) *Solution {
	s := newSolver(members, items)
	s.keep()
	s.shed()
	s.buildReceivers()
	short := s.fill(nil)
	s.buildMemberItems()
	// Balancing can free room in a zone an item could spread into; spreading
	// again can unbalance. Alternate until spreading moves nothing.
	// A balance pass marks donors stuck as it goes, so loads that drop later
	// can allow more moves: repeat until a round moves nothing.
	// Moves can also free room for items still short of replicas.
	for round := 0; round < 32; round++ {
		n := 0
		if round > 0 && len(short) > 0 {
			before := s.placed
			short = s.fill(short)
			short = s.augment(short)
			n += s.placed - before
		}
		if n+s.spread()+s.balance() == 0 && (round > 0 || len(short) == 0) {
			break // nothing moved: another round would find the same
		}
	}
	return s.finish()
}
