package allocator

// This file holds the last phase of Solve: choosing each item's primary and
// building the Solution.

// finish orders each item's replicas (primary first) and builds the Solution.
func (s *solver) finish() *Solution {
	sol := &Solution{
		Desired: make([][]int32, len(s.items)),
		Load:    make([]int, len(s.members)),
	}
	prim := make([]int32, len(s.members)) // primaries chosen so far
	hasPrimary := make([]bool, len(s.items))
	for i := range s.items {
		p := s.primaryEntry(i, prim)
		if p >= 0 {
			prim[s.flat[s.off[i]+p]]++
			hasPrimary[i] = true
		}
		if p > 0 {
			s.moveToFront(i, p)
		}
	}
	sol.LoadMoves, sol.LoadUnsettled = s.balanceLoad(hasPrimary)
	for i := range s.items {
		n := s.cnt[i]
		base := s.off[i]
		sol.Desired[i] = s.flat[base : base+n : base+n]
		sol.Slots += int(n)
		if want := s.items[i].Replication; int(n) < want {
			sol.Shortfall = append(sol.Shortfall, Shortfall{Item: i, Want: want, Got: int(n)})
		}
	}
	for m := range s.members {
		sol.Load[m] = int(s.load[m])
	}
	return sol
}

// primaryEntry returns the entry of item i to be its primary, or -1 when it
// has none that may be (no entries, or only FAILED ones). In order of
// preference: the current primary if kept (no promotion at all); a kept
// consistent replica (it can take over at once); any other kept replica
// that is not FAILED (it is further along than a new one); else a new
// replica, on the member with the fewest primaries so far, so primaries
// spread over members.
func (s *solver) primaryEntry(i int, prim []int32) int32 {
	n := s.cnt[i]
	base := s.off[i]
	p := int32(-1)
	for _, r := range s.items[i].Current {
		if r.Slot != 0 || !s.validCurrent(r) {
			continue
		}
		for k := int32(0); k < n && p < 0; k++ {
			if s.flat[base+k] == int32(r.Member) {
				p = k
			}
		}
	}
	for k := int32(0); k < n && p < 0; k++ {
		if f := s.flags[base+k]; f&flagKept != 0 && f&flagConsistent != 0 {
			p = k
		}
	}
	for k := int32(0); k < n && p < 0; k++ {
		if f := s.flags[base+k]; f&flagKept != 0 && f&flagPinned == 0 {
			p = k
		}
	}
	if p < 0 {
		for k := int32(0); k < n; k++ {
			if s.flags[base+k]&flagPinned != 0 {
				continue
			}
			if p < 0 || prim[s.flat[base+k]] < prim[s.flat[base+p]] {
				p = k
			}
		}
	}
	return p
}

// moveToFront moves entry p of item i to position 0, keeping the order of
// the others.
func (s *solver) moveToFront(i int, p int32) {
	base := s.off[i]
	m, f := s.flat[base+p], s.flags[base+p]
	copy(s.flat[base+1:base+p+1], s.flat[base:base+p])
	copy(s.flags[base+1:base+p+1], s.flags[base:base+p])
	s.flat[base], s.flags[base] = m, f
}
