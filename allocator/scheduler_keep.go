package allocator

// This file holds the first phases of Solve: keep (current replicas that
// may stay) and shed (replicas over a member's limit).

import (
	"sort"
)

// keep copies each item's valid current replicas (slot order) into its
// entries, trimming items that have more than they want.
func (s *solver) keep() {
	pre := s.currentLoad()
	var cs []keptReplica
	for i, it := range s.items {
		if len(it.Current) == 0 || s.want[i] == 0 {
			continue
		}
		cs = s.keepCandidates(it, cs[:0])
		cs = s.trimKept(i, cs, pre)
		s.storeKept(i, cs)
	}
}

// keptReplica is one current replica of an item that keep considers keeping.
type keptReplica struct {
	m     int32
	slot  int
	flags uint8
}

// currentLoad counts each member's valid current replicas. Trimming compares
// these rather than the load keep builds up, so which replica an item drops
// does not depend on the items processed before it.
func (s *solver) currentLoad() []int32 {
	pre := make([]int32, len(s.members))
	for _, it := range s.items {
		for _, r := range it.Current {
			if s.validCurrent(r) {
				pre[r.Member]++
			}
		}
	}
	return pre
}

// keepCandidates appends the item's valid current replicas to cs, one per member
// (a member with several keys for the item keeps its lowest slot and the
// flags of its first key), sorted by slot, and marks the slot-0 one primary.
func (s *solver) keepCandidates(it SchedItem, cs []keptReplica) []keptReplica {
	for _, r := range it.Current {
		if !s.validCurrent(r) {
			continue
		}
		dup := false
		for k := range cs {
			if cs[k].m == int32(r.Member) {
				dup = true
				if r.Slot < cs[k].slot {
					cs[k].slot = r.Slot
				}
			}
		}
		if dup {
			continue
		}
		f := uint8(flagKept)
		if r.State == StateFailed {
			f |= flagPinned
		}
		if r.State.Consistent() {
			f |= flagConsistent
		}
		cs = append(cs, keptReplica{m: int32(r.Member), slot: r.Slot, flags: f})
	}
	sort.Slice(cs, func(a, b int) bool { return cs[a].slot < cs[b].slot })
	for k := range cs {
		if cs[k].slot == 0 {
			cs[k].flags |= flagPrimary
		}
	}
	return cs
}

// trimKept drops candidates of item i until it has the wanted count, one at
// a time (each drop changes the zone counts the next choice depends on).
// Pinned (FAILED) replicas are never dropped, so an item may keep more.
func (s *solver) trimKept(i int, cs []keptReplica, pre []int32) []keptReplica {
	for len(cs) > int(s.want[i]) {
		k := s.trimChoice(cs, pre)
		if k < 0 {
			break
		}
		cs = append(cs[:k], cs[k+1:]...)
	}
	return cs
}

// trimChoice returns the index of the candidate to drop, or -1 when all are
// pinned. It drops non-pinned replicas from over-represented zones first (so
// what remains is spread best), then from the members most loaded before this
// solve, then non-primaries (keeping the primary avoids a promotion), then
// inconsistent ones (consistent ones already serve), then higher slots.
func (s *solver) trimChoice(cs []keptReplica, pre []int32) int {
	for z := range s.zc {
		s.zc[z] = 0
	}
	for _, c := range cs {
		s.zc[s.zoneOf[c.m]]++
	}
	better := func(a, b keptReplica) bool { // a is a better drop than b
		za, zb := s.zc[s.zoneOf[a.m]], s.zc[s.zoneOf[b.m]]
		if za != zb {
			return za > zb
		}
		if pre[a.m] != pre[b.m] {
			return pre[a.m] > pre[b.m]
		}
		pa, pb := a.flags&flagPrimary != 0, b.flags&flagPrimary != 0
		if pa != pb {
			return !pa
		}
		ca, cb := a.flags&flagConsistent != 0, b.flags&flagConsistent != 0
		if ca != cb {
			return !ca
		}
		return a.slot > b.slot
	}
	best := -1
	for k, c := range cs {
		if c.flags&flagPinned != 0 {
			continue
		}
		if best < 0 || better(c, cs[best]) {
			best = k
		}
	}
	return best
}

// storeKept writes the kept replicas as item i's first entries and counts
// them in the members' load.
func (s *solver) storeKept(i int, cs []keptReplica) {
	base := s.off[i]
	for k, c := range cs {
		s.flat[base+int32(k)] = c.m
		s.flags[base+int32(k)] = c.flags
		s.load[c.m]++
	}
	s.cnt[i] = int32(len(cs))
}

// shed removes non-pinned replicas from members over their limit
// (inactive members hold none after keep): standbys before primaries, later
// items first.
func (s *solver) shed() {
	over := false
	for m := range s.members {
		if s.load[m] > s.limit[m] {
			over = true
		}
	}
	if !over {
		return
	}
	for pass := 0; pass < 2; pass++ {
		for i := len(s.items) - 1; i >= 0; i-- {
			for k := s.cnt[i] - 1; k >= 0; k-- {
				e := s.off[i] + k
				m := s.flat[e]
				if s.load[m] <= s.limit[m] || s.flags[e]&flagPinned != 0 {
					continue
				}
				if pass == 0 && s.flags[e]&flagPrimary != 0 {
					continue
				}
				s.removeEntry(i, k)
				s.load[m]--
			}
		}
	}
}
