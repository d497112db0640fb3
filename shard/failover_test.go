package shard_test

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// TestStandbyReplayEquivalence: a hot standby's database, replayed from the
// recovery log, equals the primary's at the same position (every key,
// including offsets and the position itself).
func TestStandbyReplayEquivalence(t *testing.T) {
	e := shardtest.NewCluster(t, memory.NewBuilder(), wordcount.App())
	spec := shardtest.WordcountSpec("wc-0", 0, 1)
	e.PutSpec(spec)
	lines := shardtest.Corpus(5, 80)
	e.Publish(0, lines[:30]...)
	dirA, dirB := t.TempDir(), t.TempDir()
	a := e.StartNode("a", dirA)
	b := e.StartNode("b", dirB)
	e.Assign(a, spec.ID, 0)
	e.Assign(b, spec.ID, 1)
	e.WaitState(b, spec.ID, 1, allocator.StateStandby)
	e.Publish(0, lines[30:]...)
	if d := shardtest.DiffCounts(e.Counts(a, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("primary counts: %s", d)
	}
	var applied int64
	shardtest.Eventually(t, "standby at the primary's position", func() (bool, string) {
		sa, sb := a.Service.Status(), b.Service.Status()
		if len(sa) != 1 || len(sb) != 1 {
			return false, "missing replica"
		}
		applied = int64(sa[0].Applied)
		return sa[0].Applied == sb[0].Applied && sb[0].State == allocator.StateStandby,
			fmt.Sprintf("primary %d standby %d (%s)", sa[0].Applied, sb[0].Applied, sb[0].State)
	})
	if applied == 0 {
		t.Fatal("nothing applied")
	}
	b.Kill()
	a.Kill()
	da := shardtest.DumpDB(t, filepath.Join(dirA, "shards", spec.ID))
	db := shardtest.DumpDB(t, filepath.Join(dirB, "shards", spec.ID))
	if _, ok := da[string(recoverylog.PositionKey)]; !ok {
		t.Fatal("primary DB has no position")
	}
	if !reflect.DeepEqual(da, db) {
		t.Fatalf("standby DB (%d keys) differs from primary DB (%d keys)", len(db), len(da))
	}
}

// TestStandbyPromotionLosesNothing kills a primary while messages flow and
// promotes the hot standby in place: the final counts are exact.
func TestStandbyPromotionLosesNothing(t *testing.T) {
	e := shardtest.NewCluster(t, memory.NewBuilder(), wordcount.App())
	spec := shardtest.WordcountSpec("wc-0", 0, 1)
	e.PutSpec(spec)
	lines := shardtest.Corpus(6, 120)
	e.Publish(0, lines[:40]...)
	a := e.StartNode("a", t.TempDir())
	// b counts its replica starts: promotion must not start a new one.
	var bStarts atomic.Int64
	bApp := wordcount.App()
	bApp.NewConsumer = func() shard.Consumer { bStarts.Add(1); return &wordcount.Consumer{} }
	b := e.StartNodeApps("b", t.TempDir(), map[string]shard.App{wordcount.Name: bApp})
	e.Assign(a, spec.ID, 0)
	e.Assign(b, spec.ID, 1)
	e.WaitState(a, spec.ID, 0, allocator.StatePrimary)
	e.WaitState(b, spec.ID, 1, allocator.StateStandby)

	// Publish while the primary consumes, and kill it midway.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.Publish(0, lines[40:80]...)
	}()
	shardtest.Eventually(t, "primary consuming", func() (bool, string) {
		st := a.Service.Status()
		return len(st) == 1 && st[0].Applied > 0, "nothing applied yet"
	})
	a.Kill()
	wg.Wait()
	e.Promote(b, spec.ID, 1)
	e.WaitState(b, spec.ID, 0, allocator.StatePrimary)
	e.Publish(0, lines[80:]...)
	if d := shardtest.DiffCounts(e.Counts(b, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("counts after promotion: %s", d)
	}
	if n := bStarts.Load(); n != 1 {
		t.Fatalf("the standby started %d replicas: promotion restarted it instead of handing off in place", n)
	}
}

// TestZombiePrimaryIsFenced: a primary that keeps running after a new
// primary took over (split brain: both hold a slot-0 key) cannot commit: its
// append is fenced, it goes FAILED, and the new primary's state is exact.
func TestZombiePrimaryIsFenced(t *testing.T) {
	gate, held := make(chan struct{}), make(chan struct{})
	var n atomic.Int64
	zombieApp := shardtest.HookedApp(wordcount.Name, func(s shard.Shard, env topic.Envelope) error {
		if n.Add(1) == 23 { // stall inside a transaction, after some commits
			close(held)
			<-gate
		}
		return nil
	})
	e := shardtest.NewCluster(t, memory.NewBuilder(), wordcount.App())
	spec := shardtest.WordcountSpec("wc-0", 0, 0)
	e.PutSpec(spec)
	lines := shardtest.Corpus(7, 60)
	e.Publish(0, lines[:40]...)
	a := e.StartNodeApps("a", t.TempDir(), map[string]shard.App{wordcount.Name: zombieApp})
	e.Assign(a, spec.ID, 0)
	<-held

	b := e.StartNode("b", t.TempDir())
	e.Assign(b, spec.ID, 0) // a newer slot-0 key: a higher term
	e.WaitState(b, spec.ID, 0, allocator.StatePrimary)
	if d := shardtest.DiffCounts(e.Counts(b, spec), wordcount.Count(lines[:40])); d != "" {
		t.Fatalf("new primary: %s", d)
	}

	close(gate) // the zombie wakes up and tries to commit
	st := e.WaitState(a, spec.ID, 0, allocator.StateFailed)
	if !strings.Contains(st.Error, "fenced") {
		t.Fatalf("zombie failed with %q, want a fencing error", st.Error)
	}
	if got := a.Service.Status(); len(got) != 1 || got[0].State != allocator.StateFailed {
		t.Fatalf("zombie status %+v", got)
	}
	e.Publish(0, lines[40:]...)
	if d := shardtest.DiffCounts(e.Counts(b, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("new primary after the zombie's attempt: %s", d)
	}
}
