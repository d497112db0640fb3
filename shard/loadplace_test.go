package shard_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// TestPrimariesMoveForLoad: two shards whose messages cost a millisecond
// of work each lead on one member, their standbys on the other. Members
// report their primaries' load, and the leader hands one hot primary over
// to its standby, so each member leads one; the counts stay exact through
// the hand-over. With --placement count (allocator.Config.PlaceByCount)
// or without load reports, both would stay on the first member.
func TestPrimariesMoveForLoad(t *testing.T) {
	hot := func(id string) bool { return id == "wc-0" || id == "wc-1" }
	app := shardtest.HookedApp(wordcount.Name, func(s shard.Shard, _ topic.Envelope) error {
		if hot(s.Spec().ID) {
			for start := time.Now(); time.Since(start) < time.Millisecond; { //nolint:revive // work, by design
			}
		}
		return nil
	})
	e := shardtest.NewScheduledCluster(t, memory.NewBuilder(), app)
	e.LoadInterval = 200 * time.Millisecond
	specs := []*shard.Spec{shardtest.WordcountSpec("wc-0", 0, 1), shardtest.WordcountSpec("wc-1", 1, 1),
		shardtest.WordcountSpec("wc-2", 2, 1), shardtest.WordcountSpec("wc-3", 3, 1)}
	for _, s := range specs {
		e.PutSpec(s)
	}
	a := e.StartNode("a", t.TempDir())
	shardtest.Eventually(t, "every shard primary on a", func() (bool, string) {
		return placed(a, specs, func(as []allocator.Assignment) bool {
			return len(as) == 1 && as[0].Status.State == allocator.StatePrimary
		})
	})
	b := e.StartNode("b", t.TempDir())
	shardtest.Eventually(t, "a standby of every shard on b", func() (bool, string) {
		return placed(a, specs, func(as []allocator.Assignment) bool {
			return len(as) == 2 && as[0].Status.State == allocator.StatePrimary && as[1].Status.State == allocator.StateStandby
		})
	})
	for _, s := range specs {
		if p := primaryNode(t, s, a, b); p != a {
			t.Fatalf("%s leads on %s before any load, want a (the first member)", s.ID, p.ID)
		}
	}

	// Paced input for the hot shards until they lead on different members.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	sent := map[int][]string{}
	var pubErr error
	for p := 0; p < 2; p++ {
		wg.Add(1)
		go func() { // owned by the test: ends with cancel
			defer wg.Done()
			// 200 lines a second: a fifth of a core of work per hot shard.
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				l := fmt.Sprintf("w%d x%d", i%50, p)
				// Not ctx: a line cancelled after it was stored would be
				// counted but not in sent. Every line begun is awaited.
				if _, err := e.Pub.PublishTo(context.Background(), topic.Partition{Topic: wordcount.InputTopic, Index: p}, message.MutableMessage{Key: l, Payload: []byte(l)}); err != nil {
					mu.Lock()
					pubErr = err
					mu.Unlock()
					return
				}
				mu.Lock()
				sent[p] = append(sent[p], l)
				mu.Unlock()
			}
		}()
	}
	stop := func() {
		cancel()
		wg.Wait()
	}
	defer stop()
	shardtest.Eventually(t, "the hot shards to lead on different members", func() (bool, string) {
		snap := a.Member.KeySpace().Snapshot()
		where := map[string]string{}
		for _, as := range snap.Assignments {
			if as.Slot == 0 && as.Status.State == allocator.StatePrimary {
				where[as.Item] = as.Member
			}
		}
		return where["wc-0"] != "" && where["wc-1"] != "" && where["wc-0"] != where["wc-1"], fmt.Sprintf("primaries %v", where)
	})
	stop()
	if pubErr != nil {
		t.Fatalf("publishing: %v", pubErr)
	}
	// The oracle is the topic as stored (each line once), and it must
	// hold exactly what was acknowledged.
	stored := e.ReadTopic(topic.Description{Name: wordcount.InputTopic, Partitions: shardtest.DefaultPartitions})
	for p := 0; p < 2; p++ {
		if len(sent[p]) == 0 {
			t.Fatalf("nothing published to partition %d", p)
		}
		var lines []string
		for _, m := range stored[p] {
			lines = append(lines, string(m.Payload))
		}
		if d := shardtest.DiffCounts(wordcount.Count(lines), wordcount.Count(sent[p])); d != "" {
			t.Fatalf("partition %d holds other lines than were acknowledged: %s", p, d)
		}
		s := specs[p]
		if d := shardtest.DiffCounts(e.Counts(primaryNode(t, s, a, b), s), wordcount.Count(lines)); d != "" {
			t.Fatalf("%s after the hand-over: %s", s.ID, d)
		}
	}
}

// placed reports whether every spec's assignments, in a's mirror (slot 0
// first), satisfy ok.
func placed(a *shardtest.Node, specs []*shard.Spec, ok func([]allocator.Assignment) bool) (bool, string) {
	snap := a.Member.KeySpace().Snapshot()
	by := map[string][]allocator.Assignment{}
	for _, as := range snap.Assignments {
		by[as.Item] = append(by[as.Item], as)
	}
	for _, s := range specs {
		if !ok(by[s.ID]) {
			return false, fmt.Sprintf("%s: %+v", s.ID, by[s.ID])
		}
	}
	return true, ""
}
