package allocator

// This file holds the moving phases of Solve: spread (even zone counts per
// item) and balance (even load over members).

// spread evens out each item's zone counts (to within one) where a zone with
// fewer replicas has a member with room.
func (s *solver) spread() (moves int) {
	if s.zeff < 2 {
		return 0 // one usable zone: nothing to spread over
	}
	for i := range s.items {
		if s.cnt[i] < 2 {
			continue
		}
		// Each move takes a replica from the item's fullest zone to one with
		// at least two fewer; the guard bounds the moves per item.
		for guard := 0; guard < int(s.cnt[i]); guard++ {
			hi, target := s.spreadTarget(i)
			if target < 0 {
				break
			}
			k := s.spreadSource(i, hi)
			if k < 0 {
				break
			}
			s.moveEntry(i, k, target)
			moves++
		}
	}
	return moves
}

// spreadTarget returns item i's fullest zone hi and the member to move one
// of its replicas to: the least-loaded member with room in the zone with the
// fewest replicas, among zones with at least two fewer than hi; -1 if none.
func (s *solver) spreadTarget(i int) (hi int, target int32) {
	s.zoneCounts(i)
	hi = -1
	for z := 0; z < s.nz; z++ {
		if hi < 0 || s.zc[z] > s.zc[hi] {
			hi = z
		}
	}
	lo := -1
	target = -1
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
	return hi, target
}

// spreadSource returns the entry of item i to move out of zone hi, or -1:
// not pinned; replicas placed by this solve before kept ones (moving those
// costs no extra move), standbys before primaries (no promotion needed),
// then the most loaded member.
func (s *solver) spreadSource(i int, hi int) int32 {
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
	return bk
}

// balance moves replicas from the most loaded members to members with at
// least two fewer, within the zone-spread and limit rules, until no such
// move exists (or donors are exhausted).
func (s *solver) balance() (moves int) {
	donors := s.donorHeap()
	// cursor[d] is d's scan position over three passes of its item list:
	// replicas placed by this solve first (moving them costs no extra move),
	// then kept standbys, then kept primaries. Position c is item c%n of
	// pass c/n for a list of n items.
	cursor := make([]int32, len(s.members))
	for len(donors.h) > 0 {
		d := donors.h[0]
		// d is the most loaded donor: if no receiver is two below it, none
		// is two below any donor.
		if minRecv := s.minReceiverLoad(); minRecv < 0 || s.load[d]-2 < minRecv {
			return moves
		}
		to := s.donateOne(d, cursor)
		if to >= 0 {
			// The receiver's load grew: it may have become a donor.
			donors.pushOrFix(to)
			moves++
		}
		// A donor that could not give is stuck at this load; it is not
		// retried this pass (Solve runs another pass if anything moved).
		if to < 0 || len(s.memItems[d]) == 0 {
			donors.remove(d)
		} else {
			donors.fix(d)
		}
	}
	return moves
}

// donorHeap returns a max-heap by load of the members with replicas.
func (s *solver) donorHeap() *mheap {
	pos := make([]int32, len(s.members))
	for m := range pos {
		pos[m] = -1
	}
	donors := &mheap{key: s.load, pos: pos, max: true}
	for m := range s.members {
		if len(s.memItems[m]) > 0 {
			donors.push(int32(m))
		}
	}
	return donors
}

// minReceiverLoad returns the lowest load of a member with room, or -1 when
// no member has room.
func (s *solver) minReceiverLoad() int32 {
	minRecv := int32(-1)
	for z := range s.recv {
		if h := s.recv[z]; len(h.h) > 0 {
			if l := s.load[h.h[0]]; minRecv < 0 || l < minRecv {
				minRecv = l
			}
		}
	}
	return minRecv
}

// donateOne moves one replica away from donor d, scanning d's items from
// cursor[d] on, and returns the member that received it, or -1 when d has
// nothing left that can move.
func (s *solver) donateOne(d int32, cursor []int32) int32 {
	dl := s.load[d]
	for {
		list := s.memItems[d]
		n := int32(len(list))
		if n == 0 || cursor[d] >= 3*n {
			return -1
		}
		c := cursor[d]
		pass, idx := c/n, c%n
		i := int(list[idx])
		k := s.entryOf(i, d)
		if k < 0 {
			// d's replica of i moved away already (lists are fixed up
			// lazily): drop it and rescan the same position, which now
			// holds the list's former last item, in a list one shorter.
			s.dropListEntry(d, idx)
			cursor[d] = pass*(n-1) + idx
			continue
		}
		f := s.flags[s.off[i]+k]
		if f&flagPinned != 0 || balanceKind(f) != pass {
			cursor[d]++
			continue
		}
		to := s.balanceReceiver(i, d, dl)
		if to < 0 {
			cursor[d]++
			continue
		}
		s.moveEntry(i, k, to)
		s.dropListEntry(d, idx)
		cursor[d] = pass*(n-1) + idx
		return to
	}
}

// balanceKind returns the pass of donateOne's scan an entry belongs to: 0
// for a replica placed by this solve, 1 for a kept standby, 2 for a kept
// primary.
func balanceKind(f uint8) int32 {
	if f&flagKept == 0 {
		return 0
	}
	if f&flagPrimary != 0 {
		return 2
	}
	return 1
}

// balanceReceiver returns the least-loaded member that may take donor d's
// replica of item i (loaded at most dl-2, so the move evens load out), or -1.
// Another zone qualifies only if it holds fewer of i's replicas than d's
// zone, so the move never worsens the item's zone spread.
func (s *solver) balanceReceiver(i int, d int32, dl int32) int32 {
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
	return bm
}
