package allocator

// This file holds the converge planner: pure functions from a snapshot to
// guarded etcd operation groups and transactions. It builds clientv3 ops and
// compares but sends nothing; converge.go executes the plans.

import (
	"sort"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// opGroup is a set of guarded operations that must commit atomically (e.g. a
// promotion: new slot-0 key, old standby key and old primary key together).
type opGroup struct {
	cmps                      []clientv3.Cmp
	ops                       []clientv3.Op
	adds, removes, promotions int
	desc                      string
	// repair marks a group that removes damage (a key nobody should have
	// written): the converger logs it as a WARN once it commits.
	repair bool
}

// convergePlan is the result of planning one round.
type convergePlan struct {
	groups    []opGroup
	desired   map[string][]string // item -> "zone/member" desired (primary first)
	slots     int                 // sum of desired replication
	shortfall []string            // "item (got/want)"
	deferred  int                 // adds held back by member limits
	// deferredItems and deferredMembers are the item and member indices of
	// deferred adds.
	deferredItems, deferredMembers map[int]bool
	solveTime                      time.Duration
	// loadMoves and loadUnsettled are the solution's (Solution.LoadMoves).
	loadMoves, loadUnsettled int
}

// planInput is what a round plans from: the snapshot and the scheduler's
// view of it. scheduleInput builds it once; every planning step reads it.
type planInput struct {
	snap   Snapshot
	prefix string // without a trailing slash
	// members is the scheduler's view of snap.Members (same indices).
	members []SchedMember
	// items are snap.Items sorted by ID, with their current replicas.
	items []SchedItem
	// perItem[i] are item i's assignments (snapshot order).
	perItem [][]Assignment
	// orphans are assignments whose item or member is gone.
	orphans []Assignment
	// memberIdx maps "zone/member" to its index in snap.Members.
	memberIdx map[string]int
}

// scheduleInput converts a snapshot into the scheduler's input. Assignments
// whose item or member is gone are set apart as orphans.
func scheduleInput(snap Snapshot, prefix string) *planInput {
	in := &planInput{snap: snap, prefix: cleanPrefix(prefix)}
	in.memberIdx = make(map[string]int, len(snap.Members))
	in.members = make([]SchedMember, len(snap.Members))
	for i, m := range snap.Members {
		in.members[i] = SchedMember{Zone: m.Zone, ID: m.ID, Limit: m.Spec.ItemLimit, Exiting: m.Spec.Exiting}
		in.memberIdx[m.Key()] = i
	}
	ids := make([]string, 0, len(snap.Items))
	for id := range snap.Items {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	itemIdx := make(map[string]int, len(ids))
	in.items = make([]SchedItem, len(ids))
	in.perItem = make([][]Assignment, len(ids))
	for i, id := range ids {
		r := 0 // an item without a decoded value wants nothing
		if it := snap.Items[id].Item; it != nil {
			r = it.DesiredReplication()
		}
		in.items[i] = SchedItem{ID: id, Replication: r}
		itemIdx[id] = i
	}
	for _, a := range snap.Assignments {
		i, ok := itemIdx[a.Item]
		m, mok := in.memberIdx[a.Zone+"/"+a.Member]
		if !ok || !mok {
			in.orphans = append(in.orphans, a)
			continue
		}
		in.perItem[i] = append(in.perItem[i], a)
		in.items[i].Current = append(in.items[i].Current, SchedReplica{Member: m, Slot: a.Slot, State: a.Status.State})
		if a.Slot == 0 {
			it := &in.items[i]
			it.Load, it.LoadUnsettled, it.LoadYoung = primaryLoad(snap.Loads, a)
		}
	}
	return in
}

// primaryLoad returns the load of the primary a (slot 0) as its member
// reported it for a's term; whether it is unsettled: a live primary whose
// member reported nothing for this term yet; and whether it is young: it
// led for fewer than LoadMinDwellWindows windows when measured. Without
// any report at all (members that do not report, or placement by count),
// nothing is unsettled.
func primaryLoad(loads map[string]LoadReport, a Assignment) (load int64, unsettled, young bool) {
	if len(loads) == 0 || a.Status.State == StateFailed {
		return 0, false, false
	}
	r := loads[a.Zone+"/"+a.Member]
	if p, ok := r.Primaries[a.Item]; ok && p.Term == a.CreateRevision {
		return p.BusyMicros, false, r.young(p)
	}
	return 0, true, false
}

// planConverge is the pure part of a converge round: it solves the schedule
// for snap and returns the guarded operation groups that move the keyspace
// towards it, make-before-break:
//   - missing replicas are added first (IDLE, under the assigned member's
//     lease, guarded by CreateRevision==0 and the member key's ModRevision);
//   - a replica is removed only while the item keeps its desired number of
//     consistent (STANDBY/PRIMARY) replicas, counting what this round removes;
//   - a primary moves by promoting its successor (a consistent standby, or any
//     replica when there is no primary) to slot 0 in one group with the removal
//     (or demotion to a standby slot) of the old primary; the new slot-0 key has
//     a new CreateRevision, the new primary's term;
//   - assignments whose item or member is gone are deleted, and so are
//     assignment keys whose value does not decode (written by hand or by a
//     bug: no member can act on them, and a slot-0 one would block every
//     promotion of the item);
//   - FAILED replicas are kept (the scheduler pins them) until an operator
//     unassigns them or their member exits.
//
// Every delete is guarded by the key's ModRevision.
func planConverge(snap Snapshot, prefix string) convergePlan {
	in := scheduleInput(snap, prefix)
	start := time.Now()
	sol := Solve(in.members, in.items)
	solveTime := time.Since(start)
	plan := planFromSolution(in, sol)
	plan.solveTime = solveTime
	plan.loadMoves, plan.loadUnsettled = sol.LoadMoves, sol.LoadUnsettled
	return plan
}

// planFromSolution plans the groups for a given solution (see planConverge).
func planFromSolution(in *planInput, sol *Solution) convergePlan {
	plan := planGroups(in, sol, nil)
	if plan.deferred > 0 {
		if allow := in.overshootMembers(plan, sol); allow != nil {
			plan = planGroups(in, sol, allow)
		}
	}
	return plan
}

// overshootMembers returns the members plan deferred adds to that may
// overshoot their limit, or nil if none may. A full member with a deferred
// add normally frees room once a replica it gives up is replaced elsewhere.
// When every replica it gives up belongs to an item whose own replacement
// is deferred (e.g. two full members swapping items), waiting would never
// end: let that member overshoot its limit for the handoff.
func (in *planInput) overshootMembers(plan convergePlan, sol *Solution) []bool {
	frees := make([]bool, len(in.members))
	for i, as := range in.perItem {
		if plan.deferredItems[i] {
			continue
		}
		for _, a := range as {
			mi := in.memberIdx[a.Zone+"/"+a.Member]
			desired := false
			for _, m := range sol.Desired[i] {
				if int(m) == mi {
					desired = true
				}
			}
			if !desired {
				frees[mi] = true
			}
		}
	}
	allow := make([]bool, len(in.members))
	stuck := false
	for mi := range plan.deferredMembers {
		if !frees[mi] {
			allow[mi], stuck = true, true
		}
	}
	if !stuck {
		return nil
	}
	return allow
}

// maxTxnOps bounds the operations (and, separately, the compares) of one
// converge transaction: etcd's default --max-txn-ops.
const maxTxnOps = 128

// plannedTxn is one transaction of a converge round.
type plannedTxn struct {
	cmps                      []clientv3.Cmp
	ops                       []clientv3.Op
	adds, removes, promotions int
	descs                     []string
	repairs                   []string // descs of repair groups
}

// batchGroups packs groups into transactions of at most maxTxnOps operations
// and maxTxnOps compares, each also guarded by leaderCmp. Identical compares
// within a transaction are merged.
func batchGroups(groups []opGroup, leaderCmp clientv3.Cmp) []plannedTxn {
	var out []plannedTxn
	var cur *plannedTxn
	var seen map[string]bool
	cmpKey := func(c clientv3.Cmp) string { pc := etcdserverpb.Compare(c); return pc.String() }
	for _, g := range groups {
		newCmps := 0
		if cur != nil {
			for _, c := range g.cmps {
				if !seen[cmpKey(c)] {
					newCmps++
				}
			}
		}
		if cur == nil || len(cur.ops)+len(g.ops) > maxTxnOps || len(cur.cmps)+newCmps > maxTxnOps {
			out = append(out, plannedTxn{cmps: []clientv3.Cmp{leaderCmp}})
			cur = &out[len(out)-1]
			seen = map[string]bool{cmpKey(leaderCmp): true}
		}
		for _, c := range g.cmps {
			if k := cmpKey(c); !seen[k] {
				seen[k] = true
				cur.cmps = append(cur.cmps, c)
			}
		}
		cur.ops = append(cur.ops, g.ops...)
		cur.adds += g.adds
		cur.removes += g.removes
		cur.promotions += g.promotions
		cur.descs = append(cur.descs, g.desc)
		if g.repair {
			cur.repairs = append(cur.repairs, g.desc)
		}
	}
	return out
}
