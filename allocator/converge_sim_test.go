package allocator

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"
)

// simCluster is an in-memory keyspace for driving planConverge without etcd:
// groups are applied as the transactions would apply them.
type simCluster struct {
	rev     int64
	members []MemberInfo
	items   map[string]ItemInfo
	assign  map[string]Assignment // by key
}

const simPrefix = "/sim"

func (c *simCluster) snapshot() Snapshot {
	s := Snapshot{Revision: c.rev, Members: append([]MemberInfo(nil), c.members...), Items: map[string]ItemInfo{}}
	for id, it := range c.items {
		s.Items[id] = it
	}
	for _, a := range c.assign {
		s.Assignments = append(s.Assignments, a)
	}
	sort.Slice(s.Members, func(i, j int) bool { return s.Members[i].Key() < s.Members[j].Key() })
	sortAssignments(s.Assignments)
	return s
}

func (c *simCluster) apply(t *testing.T, g opGroup) {
	for _, op := range g.ops {
		c.rev++
		key := string(op.KeyBytes())
		switch {
		case op.IsPut():
			a, err := parseAssignmentKey(simPrefix, key)
			if err != nil {
				t.Fatalf("put of a non-assignment key %s", key)
			}
			if _, ok := c.assign[key]; ok {
				t.Fatalf("put over existing key %s (compare CreateRevision==0 would fail)", key)
			}
			if a.Status, err = DecodeReplicaStatus(op.ValueBytes()); err != nil {
				t.Fatalf("put %s: %v", key, err)
			}
			a.CreateRevision, a.ModRevision = c.rev, c.rev
			c.assign[key] = a
		case op.IsDelete():
			if _, ok := c.assign[key]; !ok {
				t.Fatalf("delete of missing key %s", key)
			}
			delete(c.assign, key)
		}
	}
}

func (c *simCluster) consistent() map[string]int {
	n := map[string]int{}
	for _, a := range c.assign {
		if a.Status.State.Consistent() {
			n[a.Item]++
		}
	}
	return n
}

// ready marks every replica consistent, as the shard layer would once caught up.
func (c *simCluster) ready(r *rand.Rand, frac float64) {
	keys := make([]string, 0, len(c.assign))
	for k := range c.assign {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		a := c.assign[k]
		if a.Status.State == StateFailed || r.Float64() > frac {
			continue
		}
		st := StateStandby
		if a.Slot == 0 {
			st = StatePrimary
		}
		if a.Status.State != st {
			c.rev++
			a.Status.State, a.ModRevision = st, c.rev
			c.assign[k] = a
		}
	}
}

func (c *simCluster) killMember(i int) {
	m := c.members[i]
	c.members = append(c.members[:i], c.members[i+1:]...)
	for k, a := range c.assign {
		if a.Zone == m.Zone && a.Member == m.ID {
			delete(c.assign, k)
		}
	}
	c.rev++
}

// TestConvergeSimulation drives random clusters through random events
// (members dying, joining, exiting; replication changes; partial readiness)
// and checks after every round that make-before-break held (no item lost
// consistent replicas below its target) and that each cluster converges to
// its desired state once every replica reports ready.
func TestConvergeSimulation(t *testing.T) {
	for seed := int64(0); seed < 300; seed++ {
		r := rand.New(rand.NewSource(seed))
		c := &simCluster{items: map[string]ItemInfo{}, assign: map[string]Assignment{}}
		nz := 1 + r.Intn(3)
		next := 0
		addMember := func() {
			c.rev++
			c.members = append(c.members, MemberInfo{Zone: fmt.Sprintf("z%d", r.Intn(nz)), ID: fmt.Sprintf("m%02d", next),
				Spec: MemberSpec{ItemLimit: 2 + r.Intn(12)}, Lease: c.rev, CreateRevision: c.rev, ModRevision: c.rev})
			next++
		}
		for i := 0; i < 2+r.Intn(6); i++ {
			addMember()
		}
		for i := 0; i < 1+r.Intn(20); i++ {
			c.rev++
			c.items[fmt.Sprintf("s%02d", i)] = ItemInfo{ID: fmt.Sprintf("s%02d", i), Item: genericItem{HotStandbys: r.Intn(3)}, ModRevision: c.rev}
		}
		for step := 0; step < 40; step++ {
			// A random event now and then.
			switch e := r.Intn(10); {
			case e == 0 && len(c.members) > 1:
				c.killMember(r.Intn(len(c.members)))
			case e == 1:
				addMember()
			case e == 2 && len(c.members) > 1:
				i := r.Intn(len(c.members))
				c.rev++
				c.members[i].Spec.Exiting = true
				c.members[i].ModRevision = c.rev
			case e == 3:
				ids := make([]string, 0, len(c.items))
				for id := range c.items {
					ids = append(ids, id)
				}
				sort.Strings(ids)
				id := ids[r.Intn(len(ids))]
				c.rev++
				c.items[id] = ItemInfo{ID: id, Item: genericItem{HotStandbys: r.Intn(3), Disable: r.Intn(8) == 0}, ModRevision: c.rev}
			}
			c.roundChecked(t, seed, step)
			c.ready(r, r.Float64())
		}
		// Quiesce: everything becomes ready; the cluster must converge.
		converged := false
		for round := 0; round < 30 && !converged; round++ {
			c.ready(r, 1)
			converged = c.roundChecked(t, seed, 100+round) == 0
		}
		if !converged {
			t.Fatalf("seed %d: did not converge", seed)
		}
		// Converged: stored assignments equal the desired ones, with a primary.
		plan := planConverge(c.snapshot(), simPrefix)
		got := map[string][]string{}
		primaries := map[string]bool{}
		for _, a := range c.assign {
			got[a.Item] = append(got[a.Item], a.Zone+"/"+a.Member)
			if a.Slot == 0 {
				primaries[a.Item] = true
			}
		}
		for id, want := range plan.desired {
			g := append([]string(nil), got[id]...)
			w := append([]string(nil), want...)
			sort.Strings(g)
			sort.Strings(w)
			if fmt.Sprint(g) != fmt.Sprint(w) {
				t.Fatalf("seed %d: item %s assigned %v, desired %v", seed, id, g, w)
			}
			if len(want) > 0 && !primaries[id] {
				t.Fatalf("seed %d: item %s has no primary", seed, id)
			}
		}
	}
}

// roundChecked plans and applies one round, checking make-before-break; it
// returns the number of groups applied.
func (c *simCluster) roundChecked(t *testing.T, seed int64, step int) int {
	t.Helper()
	snap := c.snapshot()
	plan := planConverge(snap, simPrefix)
	before := c.consistent()
	slot0 := map[string]int{}
	for _, g := range plan.groups {
		c.apply(t, g)
	}
	after := c.consistent()
	for id, it := range c.items {
		target := min(it.Item.DesiredReplication(), len(plan.desired[id]))
		if after[id] < min(before[id], target) {
			t.Fatalf("seed %d step %d: item %s consistent replicas %d -> %d (target %d)", seed, step, id, before[id], after[id], target)
		}
	}
	for _, a := range c.assign {
		if a.Slot == 0 {
			slot0[a.Item]++
		}
		if _, ok := c.items[a.Item]; !ok {
			t.Fatalf("seed %d step %d: assignment of deleted item %s kept", seed, step, a.Item)
		}
	}
	for id, n := range slot0 {
		if n > 1 {
			t.Fatalf("seed %d step %d: item %s has %d primaries", seed, step, id, n)
		}
	}
	return len(plan.groups)
}
