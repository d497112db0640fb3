package allocator

// This file holds planGroups, which turns a solution into guarded operation
// groups item by item: adds first, then a primary change, then removals
// (make-before-break, see planConverge).

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// planGroups turns a solution into operation groups. An add to a member whose
// current assignments already reach its limit is deferred (counted in
// plan.deferred) unless overshoot: such a member first loses the replicas
// it is to give up, so limits hold during make-before-break too.
func planGroups(in *planInput, sol *Solution, overshoot []bool) convergePlan {
	p := newPlanner(in, sol, overshoot)
	for _, a := range in.orphans {
		p.plan.groups = append(p.plan.groups, in.removeGroup("cleanup ", a))
	}
	for _, a := range in.snap.Undecodable {
		g := in.removeGroup("delete undecodable ", a)
		g.repair = true
		p.plan.groups = append(p.plan.groups, g)
	}
	for i := range in.items {
		st := p.readItem(i)
		p.planAdds(st)
		p.planPromotion(st)
		p.planRemovals(st)
	}
	return p.plan
}

// planner is the state of one planGroups call.
type planner struct {
	in        *planInput
	sol       *Solution
	overshoot []bool
	// held counts, per member, its current assignments plus the adds planned
	// so far: the load it will have before it gives anything up.
	held []int
	// taken holds, per item, the slots of its undecodable keys: deleted
	// this round, so the leader must not write those keys until the next.
	taken map[string][]int
	plan  convergePlan
}

func newPlanner(in *planInput, sol *Solution, overshoot []bool) *planner {
	p := &planner{in: in, sol: sol, overshoot: overshoot,
		held: make([]int, len(in.members)), taken: map[string][]int{}}
	p.plan = convergePlan{desired: make(map[string][]string, len(in.items)),
		deferredItems: map[int]bool{}, deferredMembers: map[int]bool{}}
	for _, as := range in.perItem {
		for _, a := range as {
			p.held[in.memberIdx[a.Zone+"/"+a.Member]]++
		}
	}
	for _, a := range in.snap.Undecodable {
		p.taken[a.Item] = append(p.taken[a.Item], a.Slot)
	}
	return p
}

// itemState is one item's desired and current state while its groups are
// planned; the steps update it as they plan (slots used, consistent count).
type itemState struct {
	i  int
	it SchedItem
	d  []int32 // desired members, primary first
	// inD maps a desired member to its position in d.
	inD map[int]int
	// target is the number of consistent replicas the item must keep
	// through removals: its replication, or fewer when it is short.
	target int
	// cur holds the current assignment per member (one: extra keys of the
	// same member are removed).
	cur       map[int]Assignment
	usedSlots map[int]bool
	nextSlot  int
	primary   *Assignment // the current slot-0 assignment, if any
	// consistent counts current consistent replicas, less those this
	// round's groups remove.
	consistent int
	// handled marks members whose assignment the primary change rewrote.
	handled map[int]bool
}

// freeSlot returns the lowest standby slot not used yet, and uses it.
func (st *itemState) freeSlot() int {
	for st.usedSlots[st.nextSlot] {
		st.nextSlot++
	}
	st.usedSlots[st.nextSlot] = true
	return st.nextSlot
}

// readItem records item i's desired replicas in the plan and reads its
// current state, planning the removal of duplicate keys of one member.
func (p *planner) readItem(i int) *itemState {
	it := p.in.items[i]
	d := p.sol.Desired[i]
	want := it.Replication
	p.plan.slots += want
	if len(d) < want {
		p.plan.shortfall = append(p.plan.shortfall, fmt.Sprintf("%s (%d/%d)", it.ID, len(d), want))
	}
	st := &itemState{i: i, it: it, d: d, inD: make(map[int]int, len(d)), target: min(want, len(d)),
		cur: map[int]Assignment{}, usedSlots: map[int]bool{}, nextSlot: 1, handled: map[int]bool{}}
	names := make([]string, len(d))
	for k, m := range d {
		names[k] = p.in.snap.Members[m].Key()
		st.inD[int(m)] = k
	}
	p.plan.desired[it.ID] = names

	for _, slot := range p.taken[it.ID] {
		st.usedSlots[slot] = true
	}
	as := p.in.perItem[i]
	for k := range as {
		a := as[k]
		st.usedSlots[a.Slot] = true
		mi := p.in.memberIdx[a.Zone+"/"+a.Member]
		if _, dup := st.cur[mi]; dup {
			p.plan.groups = append(p.plan.groups, p.in.removeGroup("remove duplicate ", a))
			continue
		}
		st.cur[mi] = a
		if a.Slot == 0 && st.primary == nil {
			st.primary = &as[k]
		}
		if a.Status.State.Consistent() {
			st.consistent++
		}
	}
	return st
}

// planAdds plans an IDLE assignment for each desired member that lacks one,
// in slot 0 only when the item has no primary and it is the desired
// primary. An add to a member at its limit is deferred (see planGroups).
func (p *planner) planAdds(st *itemState) {
	for k, m := range st.d {
		mi := int(m)
		if _, ok := st.cur[mi]; ok {
			continue
		}
		if p.held[mi] >= p.in.members[mi].Limit && (p.overshoot == nil || !p.overshoot[mi]) {
			p.plan.deferred++
			p.plan.deferredItems[st.i] = true
			p.plan.deferredMembers[mi] = true
			continue
		}
		p.held[mi]++
		slot := 0
		if k != 0 || st.primary != nil || st.usedSlots[0] {
			slot = st.freeSlot()
		} else {
			st.usedSlots[0] = true
		}
		mb := p.in.snap.Members[mi]
		a := Assignment{Item: st.it.ID, Zone: mb.Zone, Member: mb.ID, Slot: slot}
		c, op := p.in.put(mi, a, ReplicaStatus{State: StateIdle})
		p.plan.groups = append(p.plan.groups, opGroup{
			cmps: []clientv3.Cmp{c, p.in.memberCmp(mi)}, ops: []clientv3.Op{op}, adds: 1,
			desc: "add " + assignmentName(a),
		})
	}
}

// planPromotion plans the promotion of the desired primary, when it holds a
// standby slot now and may take over (see mayPromote). An undecodable slot-0
// key defers it to the next round: this round deletes that key.
func (p *planner) planPromotion(st *itemState) {
	if len(st.d) == 0 {
		return
	}
	next, ok := st.cur[int(st.d[0])]
	slot0Taken := false
	for _, slot := range p.taken[st.it.ID] {
		slot0Taken = slot0Taken || slot == 0
	}
	demoted := false // the old primary stays as a standby
	if st.primary != nil {
		_, demoted = st.inD[p.in.memberIdx[st.primary.Zone+"/"+st.primary.Member]]
	}
	if !ok || next.Slot == 0 || slot0Taken || !st.mayPromote(next, demoted) {
		return
	}
	p.plan.groups = append(p.plan.groups, p.promotion(st, next))
}

// mayPromote reports whether next may become primary now. Without a
// primary, or with one that is not consistent yet (it serves nothing),
// promote at once; otherwise only a consistent successor, and only while
// the item keeps its target of consistent replicas. A consistent primary
// that is demoted (it stays desired, as a standby: a hand-over for load)
// still counts: it keeps its database and only catches up on the log
// from where it stopped, so the item is not short of a copy of its state.
func (st *itemState) mayPromote(next Assignment, demoted bool) bool {
	allowed := st.primary == nil || !st.primary.Status.State.Consistent()
	if !allowed && next.Status.State.Consistent() {
		after := st.consistent
		if st.primary.Status.State.Consistent() && !demoted {
			after--
		}
		allowed = after >= st.target
	}
	return allowed
}

// promotion builds the group that moves next to slot 0 (a new key, so a new
// term) and, in the same transaction, removes the old primary or demotes it
// to a new IDLE standby key when it stays desired.
func (p *planner) promotion(st *itemState, next Assignment) opGroup {
	in := p.in
	mi := int(st.d[0])
	na := next
	na.Slot = 0
	c, op := in.put(mi, na, next.Status)
	g := opGroup{
		cmps:       []clientv3.Cmp{in.modCmp(next), c, in.memberCmp(mi)},
		ops:        []clientv3.Op{in.del(next), op},
		promotions: 1,
		desc:       "promote " + assignmentName(next),
	}
	st.handled[mi] = true
	if st.primary == nil {
		return g
	}
	old := *st.primary
	pmi := in.memberIdx[old.Zone+"/"+old.Member]
	st.handled[pmi] = true
	g.cmps = append(g.cmps, in.modCmp(old))
	g.ops = append(g.ops, in.del(old))
	if old.Status.State.Consistent() {
		st.consistent--
	}
	if _, keep := st.inD[pmi]; keep {
		da := old
		da.Slot = st.freeSlot()
		c, op := in.put(pmi, da, ReplicaStatus{State: StateIdle})
		g.cmps = append(g.cmps, c, in.memberCmp(pmi))
		g.ops = append(g.ops, op)
		g.desc += ", demote " + assignmentName(old)
	} else {
		g.removes++
		g.desc += ", remove " + assignmentName(old)
	}
	return g
}

// planRemovals removes current replicas that are not desired: inconsistent
// ones first (they serve nothing), then consistent ones while the item
// keeps its target of consistent replicas. The primary leaves only by a
// promotion of its successor.
func (p *planner) planRemovals(st *itemState) {
	var drop []Assignment
	for mi, a := range st.cur {
		if _, keep := st.inD[mi]; keep || st.handled[mi] {
			continue
		}
		if st.primary != nil && a.Slot == 0 && len(st.d) > 0 {
			continue
		}
		drop = append(drop, a)
	}
	// cur is a map: sort for a deterministic plan.
	sort.Slice(drop, func(x, y int) bool {
		cx, cy := drop[x].Status.State.Consistent(), drop[y].Status.State.Consistent()
		if cx != cy {
			return !cx
		}
		return assignmentName(drop[x]) < assignmentName(drop[y])
	})
	for _, a := range drop {
		if a.Status.State.Consistent() {
			if st.consistent-1 < st.target {
				continue
			}
			st.consistent--
		}
		p.plan.groups = append(p.plan.groups, p.in.removeGroup("remove ", a))
	}
}

// memberCmp guards a write for member mi by its member key's ModRevision, so
// the write fails if the key changed since the snapshot (a new lease, or a
// new spec such as exiting) rather than land under a stale lease or limit.
func (in *planInput) memberCmp(mi int) clientv3.Cmp {
	m := in.snap.Members[mi]
	return clientv3.Compare(clientv3.ModRevision(MemberKey(in.prefix, m.Zone, m.ID)), "=", m.ModRevision)
}

// modCmp guards a delete of a by its key's ModRevision.
func (in *planInput) modCmp(a Assignment) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(AssignmentKey(in.prefix, a)), "=", a.ModRevision)
}

// del deletes a's key (guarded by modCmp in the same group).
func (in *planInput) del(a Assignment) clientv3.Op {
	return clientv3.OpDelete(AssignmentKey(in.prefix, a))
}

// put writes a with the given status under member mi's lease, so the
// assignment vanishes with the member, guarded by the key not existing yet.
func (in *planInput) put(mi int, a Assignment, status ReplicaStatus) (clientv3.Cmp, clientv3.Op) {
	key := AssignmentKey(in.prefix, a)
	val, _ := json.Marshal(status) // a struct of strings and ints: cannot fail
	return clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
		clientv3.OpPut(key, string(val), clientv3.WithLease(clientv3.LeaseID(in.snap.Members[mi].Lease)))
}

// removeGroup is the guarded delete of a, described as what+name.
func (in *planInput) removeGroup(what string, a Assignment) opGroup {
	return opGroup{
		cmps: []clientv3.Cmp{in.modCmp(a)}, ops: []clientv3.Op{in.del(a)}, removes: 1,
		desc: what + assignmentName(a),
	}
}

// assignmentName is a's display name in group descriptions:
// item/zone/member/slot.
func assignmentName(a Assignment) string {
	return a.Item + "/" + a.Zone + "/" + a.Member + "/" + strconv.Itoa(a.Slot)
}
