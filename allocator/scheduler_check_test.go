package allocator

import (
	"fmt"
	"math/rand"
)

// checkSolution verifies the scheduler's invariants on a result; it returns
// the first violation found.
func checkSolution(members []SchedMember, items []SchedItem, sol *Solution) error {
	nm := len(members)
	if len(sol.Desired) != len(items) {
		return fmt.Errorf("desired has %d items, want %d", len(sol.Desired), len(items))
	}
	zoneIdx := map[string]int{}
	zoneOf := make([]int, nm)
	for m, mb := range members {
		z, ok := zoneIdx[mb.Zone]
		if !ok {
			z = len(zoneIdx)
			zoneIdx[mb.Zone] = z
		}
		zoneOf[m] = z
	}
	nz := len(zoneIdx)
	active := func(m int) bool { return !members[m].Exiting && members[m].Limit > 0 }
	load := make([]int, nm)
	pinned := make([]int, nm)
	holds := make([]map[int]bool, len(items))
	failed := func(i, m int) bool {
		for _, r := range items[i].Current {
			if r.Member == m && r.State == StateFailed {
				return true
			}
		}
		return false
	}
	for i, d := range sol.Desired {
		holds[i] = map[int]bool{}
		for _, m32 := range d {
			m := int(m32)
			if m < 0 || m >= nm {
				return fmt.Errorf("item %d: member index %d out of range", i, m)
			}
			if members[m].Exiting {
				return fmt.Errorf("item %d: assigned to exiting member %d", i, m)
			}
			if holds[i][m] {
				return fmt.Errorf("item %d: two replicas on member %d", i, m)
			}
			holds[i][m] = true
			load[m]++
			if failed(i, m) {
				pinned[m]++
			}
		}
		want := items[i].Replication
		if want < 0 {
			want = 0
		}
		if len(d) > want {
			np := 0
			for _, m := range d {
				if failed(i, int(m)) {
					np++
				}
			}
			if len(d) > max(want, np) || want == 0 {
				return fmt.Errorf("item %d: %d replicas, wants %d", i, len(d), want)
			}
		}
	}
	for m := range members {
		if load[m] != sol.Load[m] {
			return fmt.Errorf("member %d: load %d reported %d", m, sol.Load[m], load[m])
		}
		if load[m] > max(members[m].Limit, pinned[m]) {
			return fmt.Errorf("member %d: load %d over limit %d", m, load[m], members[m].Limit)
		}
	}
	room := func(m int) bool { return active(m) && load[m] < members[m].Limit }
	for i, d := range sol.Desired {
		want := items[i].Replication
		// Replication: a shortfall only when no member with room is free.
		if len(d) < want {
			for m := range members {
				if room(m) && !holds[i][m] {
					return fmt.Errorf("item %d: %d of %d replicas, but member %d has room (load %d limit %d)", i, len(d), want, m, load[m], members[m].Limit)
				}
			}
		}
		// Primary stays where it is while kept, unless the load phase
		// handed it to a current consistent standby.
		for _, r := range items[i].Current {
			if r.Slot == 0 && len(d) > 0 && holds[i][r.Member] && int(d[0]) != r.Member {
				if sol.LoadMoves > 0 && items[i].Load > 0 && consistentOn(items[i], int(d[0])) {
					continue
				}
				return fmt.Errorf("item %d: current primary %d kept but not primary (desired %v)", i, r.Member, d)
			}
		}
		// A FAILED replica is primary only if it already was.
		if len(d) > 1 && failed(i, int(d[0])) {
			wasPrimary := false
			for _, r := range items[i].Current {
				wasPrimary = wasPrimary || (r.Slot == 0 && r.Member == int(d[0]))
			}
			if !wasPrimary {
				return fmt.Errorf("item %d: FAILED replica on member %d made primary", i, d[0])
			}
		}
		// Zone spread: no zone has two more than a zone with a free member.
		zc := make([]int, nz)
		for _, m := range d {
			zc[zoneOf[m]]++
		}
		for _, m := range d {
			if failed(i, int(m)) {
				continue
			}
			za := zoneOf[m]
			for b := range members {
				if room(b) && !holds[i][b] && zc[zoneOf[b]]+2 <= zc[za] {
					return fmt.Errorf("item %d: zone counts %v; zone %d could take a replica on member %d", i, zc, zoneOf[b], b)
				}
			}
		}
		// Balance: no replica can move to a member with two fewer.
		for _, m32 := range d {
			a := int(m32)
			if failed(i, a) {
				continue
			}
			for b := range members {
				if !room(b) || holds[i][b] || load[a]-load[b] < 2 {
					continue
				}
				if zoneOf[b] == zoneOf[a] || zc[zoneOf[b]] < zc[zoneOf[a]] {
					return fmt.Errorf("item %d: replica on member %d (load %d) could move to member %d (load %d)", i, a, load[a], b, load[b])
				}
			}
		}
	}
	return nil
}

// consistentOn reports whether item it has a consistent replica on member m.
func consistentOn(it SchedItem, m int) bool {
	for _, r := range it.Current {
		if r.Member == m && r.State.Consistent() {
			return true
		}
	}
	return false
}

// randomCluster builds a random cluster; when withCurrent, items carry random
// current assignments (some invalid, duplicated, failed...).
func randomCluster(r *rand.Rand, withCurrent bool) ([]SchedMember, []SchedItem) {
	nz := 1 + r.Intn(4)
	nm := 1 + r.Intn(24)
	members := make([]SchedMember, nm)
	for m := range members {
		lim := 1 + r.Intn(40)
		if r.Intn(5) == 0 {
			lim = r.Intn(4)
		}
		members[m] = SchedMember{Zone: fmt.Sprintf("z%d", r.Intn(nz)), ID: fmt.Sprintf("m%02d", m), Limit: lim, Exiting: r.Intn(8) == 0}
	}
	ni := r.Intn(150)
	items := make([]SchedItem, ni)
	states := []ReplicaState{StateIdle, StateBackfill, StateStandby, StatePrimary, StateFailed}
	for i := range items {
		items[i] = SchedItem{ID: fmt.Sprintf("i%03d", i), Replication: r.Intn(5)}
		if withCurrent {
			nc := r.Intn(5)
			for k := 0; k < nc; k++ {
				st := states[r.Intn(4)]
				if r.Intn(30) == 0 {
					st = StateFailed
				}
				items[i].Current = append(items[i].Current, SchedReplica{Member: r.Intn(nm), Slot: k, State: st})
			}
		}
	}
	return members, items
}

// withCurrent returns items whose current assignments are sol's desired ones,
// all in the given state (primaries PRIMARY).
func withCurrent(items []SchedItem, sol *Solution, st ReplicaState) []SchedItem {
	out := make([]SchedItem, len(items))
	for i, it := range items {
		out[i] = SchedItem{ID: it.ID, Replication: it.Replication}
		for k, m := range sol.Desired[i] {
			s := st
			if k == 0 && st.Consistent() {
				s = StatePrimary
			}
			for _, r := range it.Current {
				if r.Member == int(m) && r.State == StateFailed {
					s = StateFailed // failed replicas stay failed
				}
			}
			out[i].Current = append(out[i].Current, SchedReplica{Member: int(m), Slot: k, State: s})
		}
	}
	return out
}
