package allocator

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// snapBuilder builds snapshots by hand for planning tests.
type snapBuilder struct {
	snap Snapshot
	rev  int64
}

func newSnap() *snapBuilder {
	return &snapBuilder{snap: Snapshot{Items: map[string]ItemInfo{}}, rev: 1}
}

func (b *snapBuilder) member(zone, id string, limit int, exiting bool) *snapBuilder {
	b.rev++
	b.snap.Members = append(b.snap.Members, MemberInfo{Zone: zone, ID: id, Spec: MemberSpec{ItemLimit: limit, Exiting: exiting},
		Lease: b.rev * 100, CreateRevision: b.rev, ModRevision: b.rev})
	return b
}

func (b *snapBuilder) item(id string, replication int) *snapBuilder {
	b.rev++
	b.snap.Items[id] = ItemInfo{ID: id, Item: genericItem{HotStandbys: replication - 1, Disable: replication == 0}, ModRevision: b.rev}
	return b
}

func (b *snapBuilder) assign(item, member string, slot int, st ReplicaState) *snapBuilder {
	b.rev++
	z, m, _ := strings.Cut(member, "/")
	b.snap.Assignments = append(b.snap.Assignments, Assignment{Item: item, Zone: z, Member: m, Slot: slot,
		Status: ReplicaStatus{State: st}, CreateRevision: b.rev, ModRevision: b.rev})
	return b
}

// junk adds an assignment key whose value does not decode.
func (b *snapBuilder) junk(item, member string, slot int) *snapBuilder {
	b.rev++
	z, m, _ := strings.Cut(member, "/")
	b.snap.Undecodable = append(b.snap.Undecodable, Assignment{Item: item, Zone: z, Member: m, Slot: slot,
		CreateRevision: b.rev, ModRevision: b.rev})
	return b
}

func (b *snapBuilder) build() Snapshot {
	s := b.snap
	s.Revision = b.rev
	sort.Slice(s.Members, func(i, j int) bool { return s.Members[i].Key() < s.Members[j].Key() })
	sortAssignments(s.Assignments)
	return s
}

func describe(plan convergePlan) []string {
	var out []string
	for _, g := range plan.groups {
		out = append(out, g.desc)
	}
	sort.Strings(out)
	return out
}

func TestPlanConverge(t *testing.T) {
	cases := []struct {
		name string
		snap Snapshot
		want []string
	}{{
		name: "new item: primary at slot 0, standby at slot 1",
		snap: newSnap().member("a", "m1", 5, false).member("b", "m2", 5, false).item("s1", 2).build(),
		want: []string{"add s1/a/m1/0", "add s1/b/m2/1"},
	}, {
		name: "primary on exiting member waits for a consistent successor",
		snap: newSnap().member("a", "m1", 5, true).member("a", "m2", 5, false).item("s1", 1).
			assign("s1", "a/m1", 0, StatePrimary).build(),
		want: []string{"add s1/a/m2/1"},
	}, {
		name: "successor still backfilling: nothing removed",
		snap: newSnap().member("a", "m1", 5, true).member("a", "m2", 5, false).item("s1", 1).
			assign("s1", "a/m1", 0, StatePrimary).assign("s1", "a/m2", 1, StateBackfill).build(),
		want: nil,
	}, {
		name: "consistent successor: promotion and removal in one group",
		snap: newSnap().member("a", "m1", 5, true).member("a", "m2", 5, false).item("s1", 1).
			assign("s1", "a/m1", 0, StatePrimary).assign("s1", "a/m2", 1, StateStandby).build(),
		want: []string{"promote s1/a/m2/1, remove s1/a/m1/0"},
	}, {
		name: "primary gone: a consistent standby is promoted at once, a new standby added",
		snap: newSnap().member("a", "m2", 5, false).member("a", "m3", 5, false).item("s1", 2).
			assign("s1", "a/m2", 2, StateStandby).build(),
		want: []string{"add s1/a/m3/1", "promote s1/a/m2/2"},
	}, {
		name: "primary gone, only an inconsistent replica: promoted anyway",
		snap: newSnap().member("a", "m2", 5, false).item("s1", 1).
			assign("s1", "a/m2", 1, StateBackfill).build(),
		want: []string{"promote s1/a/m2/1"},
	}, {
		name: "replication down: the extra consistent standby goes, the primary stays",
		snap: newSnap().member("a", "m1", 5, false).member("b", "m2", 5, false).member("c", "m3", 5, false).item("s1", 2).
			assign("s1", "a/m1", 0, StatePrimary).assign("s1", "b/m2", 1, StateStandby).assign("s1", "c/m3", 2, StateStandby).build(),
		want: []string{"remove s1/c/m3/2"},
	}, {
		name: "draining a standby needs the replacement consistent first",
		snap: newSnap().member("a", "m1", 5, false).member("a", "m2", 5, true).member("a", "m3", 5, false).item("s1", 2).
			assign("s1", "a/m1", 0, StatePrimary).assign("s1", "a/m2", 1, StateStandby).assign("s1", "a/m3", 2, StateIdle).build(),
		want: nil,
	}, {
		name: "inconsistent replicas of exiting members go at once",
		snap: newSnap().member("a", "m1", 5, false).member("a", "m2", 5, true).member("a", "m3", 5, false).item("s1", 2).
			assign("s1", "a/m1", 0, StatePrimary).assign("s1", "a/m2", 1, StateBackfill).assign("s1", "a/m3", 2, StateStandby).build(),
		want: []string{"remove s1/a/m2/1"},
	}, {
		name: "orphans: item deleted, member gone",
		snap: newSnap().member("a", "m1", 5, false).item("s1", 1).
			assign("s1", "a/m1", 0, StatePrimary).assign("s1", "a/ghost", 1, StateStandby).assign("gone", "a/m1", 0, StatePrimary).build(),
		want: []string{"cleanup gone/a/m1/0", "cleanup s1/a/ghost/1"},
	}, {
		name: "undecodable keys are deleted; their slots are not written that round",
		snap: newSnap().member("a", "m1", 5, false).member("a", "m2", 5, false).item("s1", 2).
			junk("s1", "a/m2", 1).junk("s1", "a/ghost", 7).build(),
		want: []string{"add s1/a/m1/0", "add s1/a/m2/2", "delete undecodable s1/a/ghost/7", "delete undecodable s1/a/m2/1"},
	}, {
		name: "undecodable slot-0 key: deleted; the promotion waits for the next round",
		snap: newSnap().member("a", "m2", 5, false).item("s1", 1).
			assign("s1", "a/m2", 1, StateStandby).junk("s1", "a/ghost", 0).build(),
		want: []string{"delete undecodable s1/a/ghost/0"},
	}, {
		name: "failed replica stays",
		snap: newSnap().member("a", "m1", 5, false).member("a", "m2", 5, false).item("s1", 2).
			assign("s1", "a/m1", 0, StatePrimary).assign("s1", "a/m2", 1, StateFailed).build(),
		want: nil,
	}, {
		name: "disabled item: everything removed",
		snap: newSnap().member("a", "m1", 5, false).member("a", "m2", 5, false).item("s1", 0).
			assign("s1", "a/m1", 0, StatePrimary).assign("s1", "a/m2", 1, StateStandby).build(),
		want: []string{"remove s1/a/m1/0", "remove s1/a/m2/1"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := describe(planConverge(tc.snap, "/r"))
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

func TestPromotionGroupIsAtomic(t *testing.T) {
	snap := newSnap().member("a", "m1", 5, true).member("a", "m2", 5, false).item("s1", 1).
		assign("s1", "a/m1", 0, StatePrimary).assign("s1", "a/m2", 1, StateStandby).build()
	plan := planConverge(snap, "/r")
	if len(plan.groups) != 1 {
		t.Fatalf("groups %+v", plan.groups)
	}
	g := plan.groups[0]
	var keys []string
	for _, op := range g.ops {
		kind := "del"
		if op.IsPut() {
			kind = "put"
		}
		keys = append(keys, kind+" "+string(op.KeyBytes()))
	}
	want := "del /r/assign/s1/a/m2/1,put /r/assign/s1/a/m2/0,del /r/assign/s1/a/m1/0"
	if strings.Join(keys, ",") != want {
		t.Fatalf("ops %v, want %s", keys, want)
	}
	// Guards: both old keys' ModRevision, the new key absent, m2's member key.
	if len(g.cmps) != 4 {
		t.Fatalf("cmps %d", len(g.cmps))
	}
}

func TestBatchGroupsLimits(t *testing.T) {
	b := newSnap()
	for m := 0; m < 10; m++ {
		b.member(fmt.Sprintf("z%d", m%3), fmt.Sprintf("m%d", m), 1000, false)
	}
	for i := 0; i < 1000; i++ {
		b.item(fmt.Sprintf("s%04d", i), 2)
	}
	plan := planConverge(b.build(), "/r")
	if len(plan.groups) != 2000 {
		t.Fatalf("%d groups", len(plan.groups))
	}
	leader := clientv3.Compare(clientv3.ModRevision("/r/members/z0/m0"), "=", 2)
	txns := batchGroups(plan.groups, leader)
	ops := 0
	for _, tx := range txns {
		if len(tx.ops) > maxTxnOps || len(tx.cmps) > maxTxnOps {
			t.Fatalf("txn with %d ops, %d cmps", len(tx.ops), len(tx.cmps))
		}
		if string(tx.cmps[0].Key) != "/r/members/z0/m0" {
			t.Fatal("leader compare missing")
		}
		ops += len(tx.ops)
	}
	if ops != 2000 || len(txns) > 2000/100+1 {
		t.Fatalf("%d ops in %d txns", ops, len(txns))
	}
}

// TestPlanFullMembersSwap: when two full members must swap items, each
// replica they give up waits for a replacement that itself waits for room:
// the planner lets them overshoot instead of waiting forever. When a full
// member will free room (its give-up does not wait on a deferred add), its
// add is deferred.
func TestPlanFullMembersSwap(t *testing.T) {
	snap := newSnap().member("a", "m1", 1, false).member("a", "m2", 1, false).item("s1", 1).item("s2", 1).
		assign("s1", "a/m1", 0, StatePrimary).assign("s2", "a/m2", 0, StatePrimary).build()
	in := scheduleInput(snap, "/r")
	sol := &Solution{Desired: [][]int32{{1}, {0}}} // s1 -> m2, s2 -> m1
	got := describe(planFromSolution(in, sol))
	want := []string{"add s1/a/m2/1", "add s2/a/m1/1"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("swap: got %v want %v", got, want)
	}

	// m3 has room; m2 (full) gives up s2 to m3 and must take s1 from m1.
	snap = newSnap().member("a", "m1", 1, false).member("a", "m2", 1, false).member("a", "m3", 1, false).
		item("s1", 1).item("s2", 1).
		assign("s1", "a/m1", 0, StatePrimary).assign("s2", "a/m2", 0, StatePrimary).build()
	in = scheduleInput(snap, "/r")
	sol = &Solution{Desired: [][]int32{{1}, {2}}} // s1 -> m2, s2 -> m3
	got = describe(planFromSolution(in, sol))
	want = []string{"add s2/a/m3/1"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("chain: got %v want %v", got, want)
	}
}
