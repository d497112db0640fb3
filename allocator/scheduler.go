package allocator

import (
	"sort"
)

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
// else the new replica on the member with the fewest primaries). Cost is
// about O(replicas × log members) for the fill plus linear rebalance scans.
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

type solver struct {
	members []SchedMember
	items   []SchedItem

	nz     int
	zoneOf []int32
	active []bool
	limit  []int32
	load   []int32
	zeff   int // zones with at least one active member

	off   []int32
	cnt   []int32
	want  []int32
	flat  []int32
	flags []uint8

	recv     []*mheap // per zone: active members with load < limit
	recvPos  []int32
	memItems [][]int32
	zc       []int32 // scratch zone counts
	scratch  []int32
	placed   int
}

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

func (s *solver) entries(i int) []int32 { return s.flat[s.off[i] : s.off[i]+s.cnt[i]] }

func (s *solver) holds(i int, m int32) bool {
	for _, x := range s.entries(i) {
		if x == m {
			return true
		}
	}
	return false
}

func (s *solver) validCurrent(r SchedReplica) bool {
	return r.Member >= 0 && r.Member < len(s.members) && !s.members[r.Member].Exiting
}

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

// removeEntry deletes entry k of item i, keeping order.
func (s *solver) removeEntry(i int, k int32) {
	base := s.off[i]
	n := s.cnt[i]
	copy(s.flat[base+k:base+n-1], s.flat[base+k+1:base+n])
	copy(s.flags[base+k:base+n-1], s.flags[base+k+1:base+n])
	s.cnt[i]--
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

func (s *solver) zoneCounts(i int) {
	for z := range s.zc {
		s.zc[z] = 0
	}
	for _, m := range s.entries(i) {
		s.zc[s.zoneOf[m]]++
	}
}

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
			if bm < 0 {
				break
			}
			s.flat[s.off[i]+s.cnt[i]] = bm
			s.flags[s.off[i]+s.cnt[i]] = 0
			s.cnt[i]++
			s.addLoad(bm, 1)
			s.placed++
			if s.memItems != nil {
				s.memItems[bm] = append(s.memItems[bm], int32(i))
			}
		}
		if s.cnt[i] < s.want[i] {
			short = append(short, int32(i))
		}
	}
	return short
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
				k := int32(-1)
				for kk, m := range s.entries(j) {
					if m == b32 {
						k = int32(kk)
					}
				}
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
				s.flat[s.off[i]+s.cnt[i]] = b32
				s.flags[s.off[i]+s.cnt[i]] = 0
				s.cnt[i]++
				s.addLoad(b32, 1)
				s.placed++
				s.memItems[b] = append(s.memItems[b], int32(i))
				return true
			}
		}
	}
	return false
}

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

// dropListEntry removes position idx of member m's item list (swap with last).
func (s *solver) dropListEntry(m int32, idx int32) {
	list := s.memItems[m]
	n := len(list)
	list[idx] = list[n-1]
	s.memItems[m] = list[:n-1]
}

// finish orders each item's replicas (primary first) and builds the Solution.
func (s *solver) finish() *Solution {
	sol := &Solution{
		Desired: make([][]int32, len(s.items)),
		Load:    make([]int, len(s.members)),
	}
	prim := make([]int32, len(s.members)) // primaries chosen so far
	for i := range s.items {
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
		// Only new replicas: the one on the member with the fewest
		// primaries so far, so primaries spread over members. Never a
		// FAILED replica.
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
		if p >= 0 {
			prim[s.flat[base+p]]++
		}
		if p > 0 {
			m, f := s.flat[base+p], s.flags[base+p]
			copy(s.flat[base+1:base+p+1], s.flat[base:base+p])
			copy(s.flags[base+1:base+p+1], s.flags[base:base+p])
			s.flat[base], s.flags[base] = m, f
		}
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

// mix32 is a 32-bit integer hash finalizer (deterministic tie-breaking).
func mix32(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x7feb352d
	x ^= x >> 15
	x *= 0x846ca68b
	x ^= x >> 16
	return x
}
