package shard_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// TestPrimaryCountsAndRestartsFromLocalDB runs a primary, restarts it on the
// same data dir (reusing the local DB) and checks exact counts throughout.
func TestPrimaryCountsAndRestartsFromLocalDB(t *testing.T) {
	e := shardtest.NewCluster(t, memory.NewBuilder(), wordcount.App())
	spec := shardtest.WordcountSpec("wc-0", 0, 0)
	e.PutSpec(spec)
	lines := shardtest.Corpus(1, 40)
	e.Publish(0, lines[:20]...)

	dir := t.TempDir()
	a := e.StartNode("a", dir)
	e.Assign(a, spec.ID, 0)
	e.WaitState(a, spec.ID, 0, allocator.StatePrimary)
	if d := shardtest.DiffCounts(e.Counts(a, spec), wordcount.Count(lines[:20])); d != "" {
		t.Fatalf("first run: %s", d)
	}
	e.Publish(0, lines[20:30]...)
	if d := shardtest.DiffCounts(e.Counts(a, spec), wordcount.Count(lines[:30])); d != "" {
		t.Fatalf("live: %s", d)
	}
	st := a.Service.Status()
	if len(st) != 1 || st[0].Shard != spec.ID || st[0].State != allocator.StatePrimary || st[0].Applied == 0 {
		t.Fatalf("status %+v", st)
	}
	a.Kill()
	if !shardtest.Exists(filepath.Join(dir, "shards", spec.ID, "CURRENT")) {
		t.Fatal("local DB was not kept")
	}

	e.Publish(0, lines[30:]...)
	b := e.StartNode("b", dir)
	e.Assign(b, spec.ID, 0)
	if d := shardtest.DiffCounts(e.Counts(b, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("after restart: %s", d)
	}
	shardtest.Eventually(t, "lag reported as zero", func() (bool, string) {
		st := b.Service.Status()
		if len(st) != 1 {
			return false, "no replica"
		}
		lag, ok := st[0].Lag["words/0000"]
		return ok && lag == 0, "lag not zero"
	})
}

// directCounter counts tokens without a cache: each Consume reads the
// current count with Get and writes the new one to the transaction, so
// counts are right only if Get sees the open transaction and the
// transactions still committing.
type directCounter struct{}

func (directCounter) Consume(s shard.Shard, env topic.Envelope, _ shard.Publisher) error {
	for _, tok := range strings.Fields(string(env.Message.Payload)) {
		key := []byte(wordcount.KeyPrefix + tok)
		v, err := s.Get(key)
		if err != nil {
			return err
		}
		n := int64(0)
		if v != nil {
			if n, err = strconv.ParseInt(string(v), 10, 64); err != nil {
				return err
			}
		}
		s.Transaction().Put(key, []byte(strconv.FormatInt(n+1, 10)))
	}
	return nil
}

func (directCounter) Flush(shard.Shard, shard.Publisher) error { return nil }

// TestGetReadsThroughPendingTransactions: with slow recovery-log appends,
// the next transaction consumes while the previous commit is in flight;
// an app that reads its own state with Get must still count exactly.
func TestGetReadsThroughPendingTransactions(t *testing.T) {
	mem := memory.NewBuilder()
	var inflightSeen atomic.Int64
	mem.SetAppendHook(func(ch string, msg *message.MutableMessage, st memory.Stage) error {
		if strings.HasPrefix(ch, "recovery/") && st == memory.BeforeStore && msg.Properties["recoverylog"] == "txn" {
			time.Sleep(3 * time.Millisecond) // a slow log: commits stay in flight
			inflightSeen.Add(1)
		}
		return nil
	})
	app := wordcount.App()
	app.Name = "direct"
	app.NewConsumer = func() shard.Consumer { return directCounter{} }
	e := shardtest.NewCluster(t, mem, app)
	e.TxnMaxMessages = 3
	spec := &shard.Spec{ID: "direct-0", App: "direct", Sources: []shard.Source{{Topic: wordcount.InputTopic, Partition: 0}}}
	e.PutSpec(spec)
	lines := shardtest.Corpus(11, 150)
	n := e.StartNode("n", t.TempDir())
	e.Assign(n, spec.ID, 0)
	e.WaitState(n, spec.ID, 0, allocator.StatePrimary)
	e.Publish(0, lines...)
	if d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("counts through Get: %s", d)
	}
	if inflightSeen.Load() < 10 {
		t.Fatalf("only %d transactions committed; the test needs many", inflightSeen.Load())
	}
}

// TestLeaseLossHaltsEverything: when the member's lease is revoked behind
// its back, Service.Run halts every replica and returns ErrLeaseLost.
func TestLeaseLossHaltsEverything(t *testing.T) {
	e := shardtest.NewCluster(t, memory.NewBuilder(), wordcount.App())
	for i := 0; i < 2; i++ {
		e.PutSpec(shardtest.WordcountSpec(fmt.Sprintf("wc-%d", i), i, 0))
	}
	n := e.StartNode("n", t.TempDir())
	for i := 0; i < 2; i++ {
		e.Assign(n, fmt.Sprintf("wc-%d", i), 0)
		e.WaitState(n, fmt.Sprintf("wc-%d", i), 0, allocator.StatePrimary)
	}
	if _, err := e.Client.Revoke(context.Background(), n.Member.LeaseID()); err != nil {
		t.Fatal(err)
	}
	shardtest.Eventually(t, "service stopped", func() (bool, string) {
		return len(n.Service.Status()) == 0, fmt.Sprintf("status %+v", n.Service.Status())
	})
	n.Halt()
	n.Wait()
	if !errors.Is(n.RunErr(), shard.ErrLeaseLost) {
		t.Fatalf("Run returned %v, want ErrLeaseLost", n.RunErr())
	}
	if _, _, ok := n.Service.Primary("wc-0"); ok {
		t.Fatal("a primary still serves after the lease was lost")
	}
}

// TestFailedReplicaRestartsOnNewAssignment: a FAILED replica stays failed
// until its assignment is replaced (as `shards unassign --failed` then a
// new assignment do); the new attempt resumes from the committed state.
func TestFailedReplicaRestartsOnNewAssignment(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	app := shardtest.HookedApp(wordcount.Name, func(s shard.Shard, env topic.Envelope) error {
		if fail.Load() && string(env.Message.Payload) == "boom" {
			return errors.New("transient app failure")
		}
		return nil
	})
	e := shardtest.NewCluster(t, memory.NewBuilder(), app)
	spec := shardtest.WordcountSpec("wc-0", 0, 0)
	e.PutSpec(spec)
	lines := append(shardtest.Corpus(3, 20), "boom")
	e.Publish(0, lines...)
	n := e.StartNode("n", t.TempDir())
	e.Assign(n, spec.ID, 0)
	st := e.WaitState(n, spec.ID, 0, allocator.StateFailed)
	if !strings.Contains(st.Error, "transient app failure") {
		t.Fatalf("error %q", st.Error)
	}
	fail.Store(false)
	// Unassign, then assign again: a new key.
	a := allocator.Assignment{Item: spec.ID, Zone: "z", Member: "n", Slot: 0}
	if _, err := e.Client.Delete(context.Background(), allocator.AssignmentKey(e.Prefix, a)); err != nil {
		t.Fatal(err)
	}
	shardtest.Eventually(t, "failed replica dropped", func() (bool, string) {
		return len(n.Service.Status()) == 0, fmt.Sprintf("%+v", n.Service.Status())
	})
	e.Assign(n, spec.ID, 0)
	if d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("after restart: %s", d)
	}
}

// TestTruncatedRecoveryLog: once the recovery log was truncated, a replica
// whose local DB is still at a retained position resumes from it (exact
// counts), while a replica with no usable DB cannot rebuild the state and
// fails with a truncation error instead of starting from a partial state.
func TestTruncatedRecoveryLog(t *testing.T) {
	e := shardtest.NewCluster(t, memory.NewBuilder(), wordcount.App())
	spec := shardtest.WordcountSpec("wc-0", 0, 0)
	e.PutSpec(spec)
	lines := shardtest.Corpus(12, 40)
	e.Publish(0, lines[:30]...)
	dirA := t.TempDir()
	a := e.StartNode("a", dirA)
	e.Assign(a, spec.ID, 0)
	if d := shardtest.DiffCounts(e.Counts(a, spec), wordcount.Count(lines[:30])); d != "" {
		t.Fatal(d)
	}
	a.Kill()

	rl, err := e.Opener.Open(context.Background(), &wal.OpenOption{Channel: recoverylog.Channel(spec.ID)})
	if err != nil {
		t.Fatal(err)
	}
	last, err := rl.LastID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := rl.Truncate(context.Background(), last); err != nil { // keep only the last record
		t.Fatal(err)
	}
	rl.Close()

	b := e.StartNode("b", t.TempDir()) // empty DB: the log no longer starts at the beginning
	e.Assign(b, spec.ID, 0)
	st := e.WaitState(b, spec.ID, 0, allocator.StateFailed)
	if !strings.Contains(st.Error, "truncated") {
		t.Fatalf("fresh replica failed with %q, want a truncation error", st.Error)
	}
	b.Kill()

	e.Publish(0, lines[30:]...)
	c := e.StartNode("c", dirA) // a's DB is at the last record: still in the log
	e.Assign(c, spec.ID, 0)
	if d := shardtest.DiffCounts(e.Counts(c, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("resumed from the local DB: %s", d)
	}
}

// TestSpecUpdates: a change of a running shard's transaction durations
// applies in place (no new Consumer), a change of its sources restarts it.
func TestSpecUpdates(t *testing.T) {
	var made atomic.Int64
	app := wordcount.App()
	app.NewConsumer = func() shard.Consumer { made.Add(1); return &wordcount.Consumer{} }
	e := shardtest.NewCluster(t, memory.NewBuilder(), app)
	spec := shardtest.WordcountSpec("wc-0", 0, 0)
	e.PutSpec(spec)
	lines := shardtest.Corpus(13, 30)
	e.Publish(0, lines[:10]...)
	n := e.StartNode("n", t.TempDir())
	e.Assign(n, spec.ID, 0)
	if d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(lines[:10])); d != "" {
		t.Fatal(d)
	}
	spec.MaxTxnDuration = shard.Duration(50 * time.Millisecond)
	e.PutSpec(spec)
	e.Publish(0, lines[10:20]...)
	if d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(lines[:20])); d != "" {
		t.Fatal(d)
	}
	if made.Load() != 1 {
		t.Fatalf("a duration change made %d consumers, want 1", made.Load())
	}

	spec.Sources = append(spec.Sources, shard.Source{Topic: "more", Partition: 0})
	e.PutSpec(spec)
	e.Publish(0, lines[20:]...)
	shardtest.Eventually(t, "restart on a sources change", func() (bool, string) {
		return made.Load() == 2, fmt.Sprintf("%d consumers made", made.Load())
	})
	if d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(lines)); d != "" {
		t.Fatal(d)
	}
}
