package allocator

// This file holds the solver's working state and the primitive operations
// that keep its parts (entries, loads, receiver heaps, member item lists)
// consistent with each other; the phases change state only through them.

// solver is the state of one Solve. Members and zones are dense indices.
// Each item's entries (its desired replicas so far, member indices) live in
// one flat array, so a million items cost a few allocations, not a million.
type solver struct {
	members []SchedMember
	items   []SchedItem

	nz     int     // zones
	zoneOf []int32 // per member: its zone
	active []bool  // per member: may receive replicas (not exiting, limit > 0)
	limit  []int32 // per member: Limit, clamped to [0, 1<<30]
	load   []int32 // per member: entries it holds
	zeff   int     // zones with at least one active member

	// Item i's entries are flat[off[i] : off[i]+cnt[i]], with flags[e]
	// (flagPinned...) per entry e; off leaves room for max(want, current).
	off   []int32
	cnt   []int32
	want  []int32 // per item: Replication, clamped to [0, members]
	flat  []int32
	flags []uint8

	recv    []*mheap // per zone: active members with load < limit
	recvPos []int32  // per member: its position in its zone's recv heap, or -1
	// memItems lists, per member, the items it holds (built after the first
	// fill). Entries moved away stay until a scan meets them and skips or
	// drops them.
	memItems [][]int32
	zc       []int32 // scratch zone counts
	scratch  []int32 // scratch for bestIn
	placed   int     // entries placed by fill and augment
}

// newSolver indexes members' zones, clamps limits and replication, and lays
// out each item's entries; it places nothing.
func newSolver(members []SchedMember, items []SchedItem) *solver {
	s := &solver{members: members, items: items}
	nm := len(members)
	s.zoneOf = make([]int32, nm)
	s.active = make([]bool, nm)
	s.limit = make([]int32, nm)
	s.load = make([]int32, nm)
	zones := map[string]int32{}
	activeZone := map[int32]bool{}
	for i, m := range members {
		z, ok := zones[m.Zone]
		if !ok {
			z = int32(len(zones))
			zones[m.Zone] = z
		}
		s.zoneOf[i] = z
		lim := m.Limit
		if lim < 0 {
			lim = 0
		}
		if lim > 1<<30 {
			lim = 1 << 30
		}
		s.limit[i] = int32(lim)
		s.active[i] = !m.Exiting && lim > 0
		if s.active[i] {
			activeZone[z] = true
		}
	}
	s.nz = len(zones)
	s.zeff = len(activeZone)
	s.zc = make([]int32, s.nz)

	s.off = make([]int32, len(items)+1)
	s.cnt = make([]int32, len(items))
	s.want = make([]int32, len(items))
	total := 0
	for i, it := range items {
		r := it.Replication
		if r < 0 {
			r = 0
		}
		if r > nm {
			r = nm // cannot exceed distinct members; the rest is shortfall
		}
		s.want[i] = int32(r)
		c := r
		if len(it.Current) > c {
			c = len(it.Current)
		}
		s.off[i] = int32(total)
		total += c
	}
	s.off[len(items)] = int32(total)
	s.flat = make([]int32, total)
	s.flags = make([]uint8, total)
	return s
}

// entries returns item i's entries (member indices).
func (s *solver) entries(i int) []int32 { return s.flat[s.off[i] : s.off[i]+s.cnt[i]] }

// holds reports whether member m holds item i.
func (s *solver) holds(i int, m int32) bool {
	for _, x := range s.entries(i) {
		if x == m {
			return true
		}
	}
	return false
}

// entryOf returns the index of member m's entry among item i's entries, or -1.
func (s *solver) entryOf(i int, m int32) int32 {
	k := int32(-1)
	for kk, x := range s.entries(i) {
		if x == m {
			k = int32(kk)
		}
	}
	return k
}

// validCurrent reports whether a current replica may be kept: its member
// exists and is not exiting.
func (s *solver) validCurrent(r SchedReplica) bool {
	return r.Member >= 0 && r.Member < len(s.members) && !s.members[r.Member].Exiting
}

// removeEntry deletes entry k of item i, keeping order.
func (s *solver) removeEntry(i int, k int32) {
	base := s.off[i]
	n := s.cnt[i]
	copy(s.flat[base+k:base+n-1], s.flat[base+k+1:base+n])
	copy(s.flags[base+k:base+n-1], s.flags[base+k+1:base+n])
	s.cnt[i]--
}

// buildReceivers puts every active member with room in its zone's heap,
// once keep and shed settled the loads.
func (s *solver) buildReceivers() {
	s.recvPos = make([]int32, len(s.members))
	for m := range s.recvPos {
		s.recvPos[m] = -1
	}
	s.recv = make([]*mheap, s.nz)
	for z := range s.recv {
		s.recv[z] = &mheap{key: s.load, pos: s.recvPos}
	}
	for m := range s.members {
		if s.active[m] && s.load[m] < s.limit[m] {
			s.recv[s.zoneOf[m]].push(int32(m))
		}
	}
}

// bestIn returns the least-loaded member of zone z with room that does not
// hold item i.
func (s *solver) bestIn(z int, i int) (int32, bool) {
	h := s.recv[z]
	if len(h.h) == 0 {
		return 0, false
	}
	top := h.h[0]
	if !s.holds(i, top) {
		return top, true
	}
	// Pop holders aside (at most the item's replica count), peek, restore.
	s.scratch = s.scratch[:0]
	var found int32 = -1
	for len(h.h) > 0 {
		t := h.h[0]
		if !s.holds(i, t) {
			found = t
			break
		}
		h.remove(t)
		s.scratch = append(s.scratch, t)
	}
	for _, t := range s.scratch {
		h.push(t)
	}
	return found, found >= 0
}

// addLoad changes member m's load by d and keeps its zone's receiver heap
// in step: m is in it exactly while it is active and below its limit.
func (s *solver) addLoad(m int32, d int32) {
	s.load[m] += d
	z := s.zoneOf[m]
	has := s.recvPos[m] >= 0
	room := s.active[m] && s.load[m] < s.limit[m]
	switch {
	case has && room:
		s.recv[z].fix(m)
	case has && !room:
		s.recv[z].remove(m)
	case !has && room:
		s.recv[z].push(m)
	}
}

// zoneCounts sets s.zc to item i's entries per zone.
func (s *solver) zoneCounts(i int) {
	for z := range s.zc {
		s.zc[z] = 0
	}
	for _, m := range s.entries(i) {
		s.zc[s.zoneOf[m]]++
	}
}

// buildMemberItems builds the per-member item lists that augment and
// balance scan.
func (s *solver) buildMemberItems() {
	s.memItems = make([][]int32, len(s.members))
	for m := range s.memItems {
		s.memItems[m] = make([]int32, 0, s.load[m])
	}
	for i := range s.items {
		for _, m := range s.entries(i) {
			s.memItems[m] = append(s.memItems[m], int32(i))
		}
	}
}

// place appends member m as a new entry of item i (placed by this solve).
func (s *solver) place(i int, m int32) {
	s.flat[s.off[i]+s.cnt[i]] = m
	s.flags[s.off[i]+s.cnt[i]] = 0
	s.cnt[i]++
	s.addLoad(m, 1)
	s.placed++
	// Before buildMemberItems (the first fill) there are no lists to keep.
	if s.memItems != nil {
		s.memItems[m] = append(s.memItems[m], int32(i))
	}
}

// moveEntry replaces entry k of item i (held by member from) by member to.
func (s *solver) moveEntry(i int, k int32, to int32) {
	e := s.off[i] + k
	from := s.flat[e]
	s.flat[e] = to
	s.flags[e] = 0
	s.addLoad(from, -1)
	s.addLoad(to, 1)
	s.memItems[to] = append(s.memItems[to], int32(i))
	// from's list is fixed up lazily: entries that no longer hold are skipped.
}

// dropListEntry removes position idx of member m's item list (swap with last).
func (s *solver) dropListEntry(m int32, idx int32) {
	list := s.memItems[m]
	n := len(list)
	list[idx] = list[n-1]
	s.memItems[m] = list[:n-1]
}
