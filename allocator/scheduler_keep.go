package allocator

// This file holds the first phases of Solve: keep (current replicas that
// may stay) and shed (replicas over a member's limit).

import (
	"sort"
)

// keep copies each item's valid current replicas (slot order), trimming
// items that have more than they want.
func (s *solver) keep() {
	pre := make([]int32, len(s.members))
	for _, it := range s.items {
		for _, r := range it.Current {
			if s.validCurrent(r) {
				pre[r.Member]++
			}
		}
	}
	type cand struct {
		m     int32
		slot  int
		flags uint8
	}
	var cs []cand
	for i, it := range s.items {
		if len(it.Current) == 0 || s.want[i] == 0 {
			continue
		}
		cs = cs[:0]
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
			cs = append(cs, cand{m: int32(r.Member), slot: r.Slot, flags: f})
		}
		sort.Slice(cs, func(a, b int) bool { return cs[a].slot < cs[b].slot })
		for k := range cs {
			if cs[k].slot == 0 {
				cs[k].flags |= flagPrimary
			}
		}
		// Trim to the wanted count: drop non-pinned replicas from
		// over-represented zones first, then from the most loaded members,
		// then non-primaries, then inconsistent ones, then higher slots.
		for len(cs) > int(s.want[i]) {
			for z := range s.zc {
				s.zc[z] = 0
			}
			for _, c := range cs {
				s.zc[s.zoneOf[c.m]]++
			}
			best := -1
			better := func(a, b cand) bool { // a is a better drop than b
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
			for k, c := range cs {
				if c.flags&flagPinned != 0 {
					continue
				}
				if best < 0 || better(c, cs[best]) {
					best = k
				}
			}
			if best < 0 {
				break
			}
			cs = append(cs[:best], cs[best+1:]...)
		}
		base := s.off[i]
		for k, c := range cs {
			s.flat[base+int32(k)] = c.m
			s.flags[base+int32(k)] = c.flags
			s.load[c.m]++
		}
		s.cnt[i] = int32(len(cs))
	}
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
