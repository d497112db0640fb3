package allocator

// This file holds the moving phases of Solve: spread (even zone counts per
// item) and balance (even load over members).

// spread evens out each item's zone counts (to within one) where a zone with
// fewer replicas has a member with room.
func (s *solver) spread() (moves int) {
	if s.zeff < 2 {
		return 0
	}
	for i := range s.items {
		if s.cnt[i] < 2 {
			continue
		}
		for guard := 0; guard < int(s.cnt[i]); guard++ {
			s.zoneCounts(i)
			hi, lo := -1, -1
			for z := 0; z < s.nz; z++ {
				if hi < 0 || s.zc[z] > s.zc[hi] {
					hi = z
				}
			}
			// The target zone: fewest replicas among zones with a candidate.
			var target int32 = -1
			for z := 0; z < s.nz; z++ {
				if s.zc[z]+2 > s.zc[hi] {
					continue
				}
				m, ok := s.bestIn(z, i)
				if !ok {
					continue
				}
				if lo < 0 || s.zc[z] < s.zc[lo] || (s.zc[z] == s.zc[lo] && s.load[m] < s.load[target]) {
					lo, target = z, m
				}
			}
			if target < 0 {
				break
			}
			// Move the best candidate out of zone hi: not pinned, standby
			// before primary, most loaded member first.
			var bk int32 = -1
			for k := int32(0); k < s.cnt[i]; k++ {
				e := s.off[i] + k
				m := s.flat[e]
				if int(s.zoneOf[m]) != hi || s.flags[e]&flagPinned != 0 {
					continue
				}
				if bk < 0 {
					bk = k
					continue
				}
				be := s.off[i] + bk
				// Prefer replicas placed by this solve, then standbys.
				nb, nk := s.flags[be]&flagKept == 0, s.flags[e]&flagKept == 0
				if nb != nk {
					if nk {
						bk = k
					}
					continue
				}
				pb, pk := s.flags[be]&flagPrimary != 0, s.flags[e]&flagPrimary != 0
				if pb != pk {
					if pb {
						bk = k
					}
					continue
				}
				if s.load[m] > s.load[s.flat[be]] {
					bk = k
				}
			}
			if bk < 0 {
				break
			}
			s.moveEntry(i, bk, target)
			moves++
		}
	}
	return moves
}

// balance moves replicas from the most loaded members to members with at
// least two fewer, within the zone-spread and limit rules, until no such
// move exists (or donors are exhausted).
func (s *solver) balance() (moves int) {
	donorPos := make([]int32, len(s.members))
	for m := range donorPos {
		donorPos[m] = -1
	}
	donors := &mheap{key: s.load, pos: donorPos, max: true}
	for m := range s.members {
		if len(s.memItems[m]) > 0 {
			donors.push(int32(m))
		}
	}
	// Scan position over three passes of a donor's items: replicas placed by
	// this solve first (moving them costs no extra move), then kept
	// standbys, then kept primaries.
	cursor := make([]int32, len(s.members))
	for len(donors.h) > 0 {
		d := donors.h[0]
		dl := s.load[d]
		minRecv := int32(-1)
		for z := range s.recv {
			if h := s.recv[z]; len(h.h) > 0 {
				if l := s.load[h.h[0]]; minRecv < 0 || l < minRecv {
					minRecv = l
				}
			}
		}
		if minRecv < 0 || dl-2 < minRecv {
			return moves // no member could take a replica from any donor
		}
		moved := false
		for !moved {
			list := s.memItems[d]
			n := int32(len(list))
			if n == 0 || cursor[d] >= 3*n {
				break
			}
			c := cursor[d]
			pass, idx := c/n, c%n
			i := int(list[idx])
			// Locate d's entry in item i (it may have moved away already).
			k := int32(-1)
			for kk, m := range s.entries(i) {
				if m == d {
					k = int32(kk)
				}
			}
			if k < 0 {
				s.dropListEntry(d, idx)
				cursor[d] = pass*(n-1) + idx
				continue
			}
			e := s.off[i] + k
			f := s.flags[e]
			kind := int32(0) // placed by this solve
			if f&flagKept != 0 {
				kind = 1
				if f&flagPrimary != 0 {
					kind = 2
				}
			}
			if f&flagPinned != 0 || kind != pass {
				cursor[d]++
				continue
			}
			s.zoneCounts(i)
			zd := s.zoneOf[d]
			var bm int32 = -1
			for z := 0; z < s.nz; z++ {
				if int32(z) != zd && s.zc[z] >= s.zc[zd] {
					continue
				}
				m, ok := s.bestIn(z, i)
				if !ok || s.load[m] > dl-2 {
					continue
				}
				if bm < 0 || s.load[m] < s.load[bm] {
					bm = m
				}
			}
			if bm < 0 {
				cursor[d]++
				continue
			}
			s.moveEntry(i, k, bm)
			s.dropListEntry(d, idx)
			cursor[d] = pass*(n-1) + idx
			if donorPos[bm] >= 0 {
				donors.fix(bm)
			} else {
				donors.push(bm)
			}
			moved = true
			moves++
		}
		if !moved || len(s.memItems[d]) == 0 {
			donors.remove(d)
		} else {
			donors.fix(d)
		}
	}
	return moves
}
