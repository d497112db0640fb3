package shard_test

import (
	"fmt"
	"testing"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// TestPrimaryConsumesWhileWaitingForACommitSlot: while every slot of the
// member's commit gate is taken (other primaries' commits in flight), a
// primary whose transaction could close goes on consuming into it and
// commits nothing; once a slot is free, what it consumed meanwhile goes
// out in one transaction, and the counts are exact.
func TestPrimaryConsumesWhileWaitingForACommitSlot(t *testing.T) {
	e := shardtest.NewCluster(t, jetstream.NewBuilder(jetstream.Config{URL: natstest.Start(t)}), wordcount.App())
	spec := shardtest.WordcountSpec("gate", 0, 0)
	e.PutSpec(spec)
	n := e.StartPrimary("n", t.TempDir(), spec)
	// The counters are the process's: count from here (go test -count).
	txns0, consumed0 := shardCounter(t, "consumerd_shard_transactions_total", "gate"), shardCounter(t, "consumerd_shard_messages_consumed_total", "gate")
	txns := func() float64 { return shardCounter(t, "consumerd_shard_transactions_total", "gate") - txns0 }
	consumed := func() float64 { return shardCounter(t, "consumerd_shard_messages_consumed_total", "gate") - consumed0 }

	// A first line: committed at once (no wait while slots are free).
	e.Publish(0, "warm up")
	shardtest.Eventually(t, "the first line committed", func() (bool, string) {
		return txns() == 1, fmt.Sprintf("%v transactions", txns())
	})

	release := shard.FillCommitGate(n.Service)
	defer release()
	lines := []string{"a b", "b c", "c d", "d e", "e f"}
	for i, l := range lines {
		e.Publish(0, l)
		shardtest.Eventually(t, fmt.Sprintf("line %d consumed", i+1), func() (bool, string) {
			c := consumed()
			return c == float64(i+2), fmt.Sprintf("%v consumed", c)
		})
	}
	if got := txns(); got != 1 {
		t.Fatalf("%v transactions while no commit slot was free, want still 1", got)
	}
	if st, _ := e.Status(n, "gate", 0); st.State != allocator.StatePrimary {
		t.Fatalf("waiting for a slot: %+v, want PRIMARY", st)
	}

	release()
	shardtest.Eventually(t, "the waiting transaction committed", func() (bool, string) {
		return txns() == 2, fmt.Sprintf("%v transactions", txns())
	})
	if d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(append([]string{"warm up"}, lines...))); d != "" {
		t.Fatalf("counts: %s", d)
	}
}

// shardCounter is counter name's series for shardID (0: none yet).
func shardCounter(t *testing.T, name, shardID string) float64 {
	t.Helper()
	v, _ := gauge(t, name, shardID)
	return v
}
