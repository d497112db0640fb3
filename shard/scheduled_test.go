package shard_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
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

// TestRestartPolicy: a shard whose spec has a restart policy and whose app
// fails twice on a message, then succeeds, is PRIMARY again with exact
// counts without anyone unassigning it; the leader's restart record shows
// the two attempts. A shard without a policy stays FAILED (manual only).
func TestRestartPolicy(t *testing.T) {
	var fails atomic.Int32
	app := shardtest.HookedApp(wordcount.Name, func(s shard.Shard, env topic.Envelope) error {
		if string(env.Message.Payload) == "boom" && s.Spec().ID == "wc-0" && fails.Add(1) <= 2 {
			return fmt.Errorf("injected app failure %d", fails.Load())
		}
		if string(env.Message.Payload) == "boom" && s.Spec().ID == "wc-1" {
			return errors.New("injected permanent failure")
		}
		return nil
	})
	e := shardtest.NewScheduledCluster(t, memory.NewBuilder(), app)
	withPolicy := shardtest.WordcountSpec("wc-0", 0, 0)
	withPolicy.Restart = &shard.RestartSpec{MaxAttempts: 3, InitialBackoff: shard.Duration(100 * time.Millisecond), MaxBackoff: shard.Duration(time.Second)}
	manual := shardtest.WordcountSpec("wc-1", 1, 0)
	e.PutSpec(withPolicy)
	e.PutSpec(manual)
	lines := append(shardtest.Corpus(5, 30), "boom")
	e.Publish(0, lines...)
	e.Publish(1, "boom")
	n := e.StartNode("a", t.TempDir())

	shardtest.Eventually(t, "wc-0 PRIMARY again after two automatic restarts", func() (bool, string) {
		snap := n.Member.KeySpace().Snapshot()
		rec := snap.Restarts["wc-0"]
		for _, a := range snap.Assignments {
			if a.Item == "wc-0" && a.Status.State == allocator.StatePrimary && rec.Attempts == 2 && fails.Load() == 3 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("failures %d, record %+v, assignments %+v", fails.Load(), rec, snap.Assignments)
	})
	if d := shardtest.DiffCounts(e.Counts(n, withPolicy), wordcount.Count(lines)); d != "" {
		t.Fatalf("after the restarts: %s", d)
	}
	snap := n.Member.KeySpace().Snapshot()
	if rec, ok := snap.Restarts["wc-0"]; !ok || rec.MaxAttempts != 3 || !strings.Contains(rec.Error, "injected app failure 2") {
		t.Fatalf("wc-0's restart record: %+v (present %v), want the last failure and max 3", rec, ok)
	}
	if _, ok := snap.Restarts["wc-1"]; ok {
		t.Fatalf("wc-1 has no restart policy but got a restart record: %+v", snap.Restarts["wc-1"])
	}
	st := e.WaitState(n, manual.ID, 0, allocator.StateFailed)
	if !strings.Contains(st.Error, "injected permanent failure") {
		t.Fatalf("wc-1: %+v", st)
	}
}
