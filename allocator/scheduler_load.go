package allocator

// This file holds the load phase of Solve: once each item's replicas and
// primary are chosen, hand primaries over to consistent standbys so that no
// member's primary load stands far above the mean.

// Hysteresis of balanceLoad: it starts only when the busiest member's
// primary load is above loadTrigger times the mean (and above it by at
// least loadMinExcess), and then moves primaries until the busiest is at
// most loadTarget times the mean. A move must lower the larger of the two
// members' loads by at least loadMinGain of the mean, so a measurement's
// small noise moves no primary, and a primary does not move back and forth
// between two members under steady loads (the move back would have to
// lower the same maximum again). Against larger noise, members report
// rates over their last few windows, and a primary that took over less
// than LoadMinDwellWindows windows ago is not moved again.
const (
	loadTrigger   = 1.25
	loadTarget    = 1.10
	loadMinGain   = 0.05
	loadMinExcess = 50_000 // µs per second: 5% of a core
	// loadMaxMoves bounds the primaries moved by one solve: each move
	// pauses its shard for a hand-over, and the next moves wait until
	// these were measured (LoadUnsettled).
	loadMaxMoves = 16
)

// balanceLoad moves primaries for load and returns how many it moved, or
// 0 and the number of unsettled items when some item's load is not known
// yet. hasPrimary[i] says item i's entry 0 is its primary. Only a kept
// consistent standby on an active member takes over (a promotion, no
// state copied), so the replicas' placement and every rule Solve keeps
// are unchanged; items without standbys keep their primary where it is.
func (s *solver) balanceLoad(hasPrimary []bool) (moves, unsettled int) {
	var total int64
	for i := range s.items {
		if s.items[i].LoadUnsettled {
			unsettled++
		}
		total += max(s.items[i].Load, 0)
	}
	if total == 0 || unsettled > 0 {
		return 0, unsettled
	}
	active := 0
	for m := range s.members {
		if s.active[m] {
			active++
		}
	}
	if active < 2 {
		return 0, 0
	}
	pl := make([]int64, len(s.members)) // primary load per member
	byMember := make([][]int32, len(s.members))
	for i := range s.items {
		if !hasPrimary[i] {
			continue
		}
		m := s.flat[s.off[i]]
		pl[m] += max(s.items[i].Load, 0)
		byMember[m] = append(byMember[m], int32(i))
	}
	mean := float64(total) / float64(active)
	h := busiest(pl)
	if float64(pl[h]) <= loadTrigger*mean || float64(pl[h])-mean < loadMinExcess {
		return 0, 0
	}
	for moves < loadMaxMoves && float64(pl[h]) > loadTarget*mean {
		i, k := s.bestHandOver(h, byMember[h], pl, int64(loadMinGain*mean))
		if i < 0 {
			break
		}
		t := s.flat[s.off[i]+k]
		w := s.items[i].Load
		s.moveToFront(int(i), k)
		pl[h] -= w
		pl[t] += w
		byMember[h] = removeItem(byMember[h], i)
		byMember[t] = append(byMember[t], i)
		moves++
		h = busiest(pl)
	}
	return moves, 0
}

// bestHandOver returns the item among h's primaries and the entry of its
// consistent standby to hand the primary to that lowers the larger of the
// two members' loads the most, by at least minGain; -1 when none does.
// Ties go to the hand-over that leaves the receiver less loaded (room for
// the next), then to the lower item index and entry: deterministic.
func (s *solver) bestHandOver(h int32, prims []int32, pl []int64, minGain int64) (int32, int32) {
	bi, bk := int32(-1), int32(-1)
	var bestAfter, bestRecv int64
	for _, i := range prims {
		w := s.items[i].Load
		if w <= 0 || s.items[i].LoadYoung {
			continue
		}
		base := s.off[i]
		for k := int32(1); k < s.cnt[i]; k++ {
			f, t := s.flags[base+k], s.flat[base+k]
			if f&flagKept == 0 || f&flagConsistent == 0 || f&flagPinned != 0 || !s.active[t] {
				continue
			}
			after := max(pl[h]-w, pl[t]+w)
			if pl[h]-after < minGain || pl[h]-after <= 0 {
				continue
			}
			recv := pl[t] + w
			better := bi < 0 || after < bestAfter ||
				(after == bestAfter && (recv < bestRecv || (recv == bestRecv && (i < bi || (i == bi && k < bk)))))
			if better {
				bi, bk, bestAfter, bestRecv = i, k, after, recv
			}
		}
	}
	return bi, bk
}

// busiest returns the member with the highest load (the lowest index of
// equals).
func busiest(pl []int64) int32 {
	var h int32
	for m := range pl {
		if pl[m] > pl[h] {
			h = int32(m)
		}
	}
	return h
}

// removeItem removes item i from list, keeping the others' order.
func removeItem(list []int32, i int32) []int32 {
	for x, v := range list {
		if v == i {
			return append(list[:x], list[x+1:]...)
		}
	}
	return list
}
