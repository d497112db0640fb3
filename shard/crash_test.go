package shard_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// crashPoint arms one crash: the k-th occurrence of a step signals crashed,
// and (for blocking steps) holds the step until release is closed.
type crashPoint struct {
	k       int64
	n       atomic.Int64
	crashed chan struct{}
	release chan struct{}
	once    sync.Once
}

func newCrashPoint(k int) *crashPoint {
	return &crashPoint{k: int64(k), crashed: make(chan struct{}), release: make(chan struct{})}
}

// hit counts an occurrence and reports whether it is the armed one.
func (c *crashPoint) hit() bool {
	if c.n.Add(1) != c.k {
		return false
	}
	c.once.Do(func() { close(c.crashed) })
	return true
}

// TestExactlyOnceUnderCrashes kills the primary at each step of the
// transaction path and restarts the shard (on the same data dir, reusing
// the local DB, or on a fresh one): the final counts equal a crash-free
// run's, so no message was lost or counted twice.
func TestExactlyOnceUnderCrashes(t *testing.T) {
	stages := []string{"mid-consume", "before-log-append", "after-append-before-apply", "after-apply"}
	for _, stage := range stages {
		for _, k := range []int{1, 3} {
			for _, sameDir := range []bool{true, false} {
				name := fmt.Sprintf("%s/k=%d/same-dir=%v", stage, k, sameDir)
				t.Run(name, func(t *testing.T) { runCrash(t, stage, k, sameDir) })
			}
		}
	}
}

func runCrash(t *testing.T, stage string, k int, sameDir bool) {
	mem := memory.NewBuilder()
	cp := newCrashPoint(k)
	var armed atomic.Bool
	armed.Store(true)
	app := shardtest.HookedApp(wordcount.Name, func(s shard.Shard, env topic.Envelope) error {
		if stage == "mid-consume" && armed.Load() && cp.hit() {
			<-s.Context().Done() // "dies" here: the node is killed under it
			return s.Context().Err()
		}
		return nil
	})
	spec := shardtest.WordcountSpec("wc-0", 0, 0)
	recovery := recoverylog.Channel(spec.ID)
	var recoveryLast func() message.MessageID
	mem.SetAppendHook(func(ch string, msg *message.MutableMessage, st memory.Stage) error {
		if ch != recovery || msg.Properties["recoverylog"] != "txn" || !armed.Load() {
			return nil
		}
		switch {
		case stage == "before-log-append" && st == memory.BeforeStore && cp.hit():
			<-cp.release
			return errors.New("injected: append lost")
		case stage == "after-append-before-apply" && st == memory.AfterStore && cp.hit():
			<-cp.release
			return errors.New("injected: acknowledgement lost")
		case stage == "after-apply" && st == memory.AfterStore:
			cp.hit() // signal only; the test kills once the record is applied
		}
		return nil
	})
	e := shardtest.NewCluster(t, mem, app)
	recoveryLast = func() message.MessageID { return e.LastID(recovery) }
	e.PutSpec(spec)
	lines := shardtest.Corpus(k, 60)
	e.Publish(0, lines[:40]...)

	dir1 := t.TempDir()
	a := e.StartNode("a", dir1)
	e.Assign(a, spec.ID, 0)
	<-cp.crashed
	if stage == "after-apply" {
		want := recoveryLast()
		shardtest.Eventually(t, "crash-point txn applied", func() (bool, string) {
			st := a.Service.Status()
			return len(st) == 1 && st[0].Applied >= want, fmt.Sprintf("status %+v, want applied >= %d", st, want)
		})
	}
	armed.Store(false)
	a.Halt()
	close(cp.release)
	a.Wait()

	dir2 := dir1
	if !sameDir {
		dir2 = t.TempDir()
	}
	e.Publish(0, lines[40:]...)
	b := e.StartNode("b", dir2)
	e.Assign(b, spec.ID, 0)
	e.WaitState(b, spec.ID, 0, allocator.StatePrimary)
	if d := shardtest.DiffCounts(e.Counts(b, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("counts differ from the crash-free oracle: %s", d)
	}
}
