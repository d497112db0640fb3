package shard_test

import (
	"fmt"
	"testing"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// primaryNode waits until one of nodes runs spec's primary and returns it.
func primaryNode(t *testing.T, spec *shard.Spec, nodes ...*shardtest.Node) *shardtest.Node {
	t.Helper()
	var p *shardtest.Node
	shardtest.Eventually(t, "a primary of "+spec.ID, func() (bool, string) {
		for _, n := range nodes {
			if _, release, ok := n.Service.Primary(spec.ID); ok {
				release()
				p = n
				return true, ""
			}
		}
		return false, "no primary yet"
	})
	return p
}

// TestScheduledFailover lets the allocator place two shards with one hot
// standby each on two members, kills the member running a primary, and
// checks that the leader's promotion of the standby loses and repeats
// nothing.
func TestScheduledFailover(t *testing.T) {
	e := shardtest.NewScheduledCluster(t, memory.NewBuilder(), wordcount.App())
	specs := []*shard.Spec{shardtest.WordcountSpec("wc-0", 0, 1), shardtest.WordcountSpec("wc-1", 1, 1)}
	for _, s := range specs {
		e.PutSpec(s)
	}
	lines := [2][]string{shardtest.Corpus(30, 80), shardtest.Corpus(31, 80)}
	e.Publish(0, lines[0][:40]...)
	e.Publish(1, lines[1][:40]...)
	a := e.StartNode("a", t.TempDir())
	b := e.StartNode("b", t.TempDir())
	nodes := []*shardtest.Node{a, b}

	// Every shard gets a primary and a caught-up standby on the other member.
	shardtest.Eventually(t, "placement", func() (bool, string) {
		snap := a.Member.KeySpace().Snapshot()
		states := map[string][]allocator.ReplicaState{}
		for _, as := range snap.Assignments {
			states[as.Item] = append(states[as.Item], as.Status.State)
		}
		for _, s := range specs {
			st := states[s.ID]
			if len(st) != 2 || st[0] != allocator.StatePrimary || st[1] != allocator.StateStandby {
				return false, fmt.Sprintf("%s: %v", s.ID, st)
			}
		}
		return true, ""
	})
	for i, s := range specs {
		p := primaryNode(t, s, nodes...)
		if d := shardtest.DiffCounts(e.Counts(p, s), wordcount.Count(lines[i][:40])); d != "" {
			t.Fatalf("%s before failover: %s", s.ID, d)
		}
	}

	// PrimaryOf, over a member's mirror, names the members running the
	// primaries.
	for _, s := range specs {
		want := "http://" + primaryNode(t, s, nodes...).ID
		shardtest.Eventually(t, "the mirror names "+want+" as primary of "+s.ID, func() (bool, string) {
			_, ep, _ := shard.PrimaryOf(a.Member.KeySpace().Snapshot(), s.ID)
			return ep == want, fmt.Sprintf("PrimaryOf(%s) endpoint %q", s.ID, ep)
		})
	}

	victim := primaryNode(t, specs[0], nodes...)
	survivor := a
	if victim == a {
		survivor = b
	}
	victim.Kill()
	e.Publish(0, lines[0][40:]...)
	e.Publish(1, lines[1][40:]...)
	for i, s := range specs {
		if d := shardtest.DiffCounts(e.Counts(survivor, s), wordcount.Count(lines[i])); d != "" {
			t.Fatalf("%s after failover: %s", s.ID, d)
		}
	}
	shardtest.Eventually(t, "the survivor's mirror names it as every primary", func() (bool, string) {
		snap := survivor.Member.KeySpace().Snapshot()
		for _, s := range specs {
			if _, ep, _ := shard.PrimaryOf(snap, s.ID); ep != "http://"+survivor.ID {
				return false, fmt.Sprintf("PrimaryOf(%s) endpoint %q", s.ID, ep)
			}
		}
		return true, ""
	})
}
