package allocator

// This file holds the placing phases of Solve: fill (greedy placement of
// missing replicas) and augment (placement through one-step moves when every
// member with room already holds the item).

// fill places missing replicas: each on the least-loaded member (with room,
// not holding the item) of a zone with the fewest of the item's replicas.
// It returns the items still short. only, if non-nil, limits it to those items.
func (s *solver) fill(only []int32) (short []int32) {
	n := len(s.items)
	if only != nil {
		n = len(only)
	}
	for x := 0; x < n; x++ {
		i := x
		if only != nil {
			i = int(only[x])
		}
		for s.cnt[i] < s.want[i] {
			m := s.fillTarget(i)
			if m < 0 {
				break
			}
			s.place(i, m)
		}
		if s.cnt[i] < s.want[i] {
			short = append(short, int32(i))
		}
	}
	return short
}

// fillTarget returns the member for item i's next replica, or -1 when no
// member with room lacks it: the least-loaded candidate of a zone with the
// fewest of i's replicas.
func (s *solver) fillTarget(i int) int32 {
	s.zoneCounts(i)
	var bm int32 = -1
	var bz int32
	// Ties go to the zone with the lowest hash of (item, zone), so
	// items' zone combinations are spread evenly (a lost member's
	// replicas then have every zone to go to).
	var bh uint32
	for z := 0; z < s.nz; z++ {
		m, ok := s.bestIn(z, i)
		if !ok {
			continue
		}
		h := mix32(uint32(i)*0x9E3779B1 ^ uint32(z)*0x85EBCA77 ^ uint32(s.cnt[i]))
		if bm < 0 || s.zc[z] < s.zc[bz] || (s.zc[z] == s.zc[bz] && (s.load[m] < s.load[bm] || (s.load[m] == s.load[bm] && h < bh))) {
			bm, bz, bh = m, int32(z), h
		}
	}
	return bm
}

// augment places replicas of short items that fill could not place because
// every member with room already holds the item: it moves another item j
// from a member b (not holding i) to a member a with room, then places i on
// b — a one-step augmenting path. Work is bounded by a budget.
func (s *solver) augment(short []int32) (still []int32) {
	budget := 4_000_000
	var room []int32
	for _, i32 := range short {
		i := int(i32)
		for s.cnt[i] < s.want[i] && budget > 0 && s.augmentOne(i, &room, &budget) {
		}
		if s.cnt[i] < s.want[i] {
			still = append(still, i32)
		}
	}
	return still
}

// augmentOne tries one augmenting move for item i over the members that
// have room now. Non-primaries move first: moving a primary costs its item
// a promotion.
func (s *solver) augmentOne(i int, room *[]int32, budget *int) bool {
	*room = (*room)[:0]
	for _, h := range s.recv {
		*room = append(*room, h.h...)
	}
	if len(*room) == 0 {
		return false
	}
	for pass := 0; pass < 2; pass++ {
		if s.augmentPass(i, *room, budget, pass == 1) {
			return true
		}
	}
	return false
}

// augmentPass looks for a member a with room, a member b not holding i, and
// an item j on b that may move to a (a lacks j, the replica is not pinned, is
// a primary exactly when primaries, and the move keeps j's zone spread);
// it moves j's replica from b to a and places i on b.
func (s *solver) augmentPass(i int, room []int32, budget *int, primaries bool) bool {
	for _, a := range room {
		za := s.zoneOf[a]
		for b := range s.members {
			b32 := int32(b)
			if !s.active[b] || b32 == a || s.holds(i, b32) {
				continue
			}
			list := s.memItems[b]
			for idx := 0; idx < len(list); idx++ {
				*budget--
				if *budget <= 0 {
					return false
				}
				j := int(list[idx])
				if j == i || s.holds(j, a) {
					continue
				}
				k := s.entryOf(j, b32)
				if k < 0 || s.flags[s.off[j]+k]&flagPinned != 0 {
					continue
				}
				if isP := s.flags[s.off[j]+k]&flagPrimary != 0; isP != primaries {
					continue
				}
				s.zoneCounts(j)
				if za != s.zoneOf[b] && s.zc[za] >= s.zc[s.zoneOf[b]] {
					continue
				}
				s.moveEntry(j, k, a)
				s.dropListEntry(b32, int32(idx))
				s.place(i, b32)
				return true
			}
		}
	}
	return false
}

// mix32 is a 32-bit integer hash finalizer (deterministic tie-breaking).
func mix32(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x7feb352d
	x ^= x >> 15
	x *= 0x846ca68b
	x ^= x >> 16
	return x
}
