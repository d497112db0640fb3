package recoverylog

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

func newJetStreamOpener(t testing.TB) wal.Opener {
	t.Helper()
	url := natstest.Start(t)
	op, err := wal.NewOpenerBuilder(jetstream.NewBuilder(jetstream.Config{URL: url})).Build()
	if err != nil {
		t.Fatalf("jetstream opener: %v", err)
	}
	t.Cleanup(op.Close)
	return op
}

// TestJetStreamRecoveryLog runs the recovery log on a real embedded
// nats-server: a transaction over JetStream's 1 MiB max_payload round-trips
// (as chunks), a replica replays to the same DB, and after a second handoff
// the first writer is fenced.
func TestJetStreamRecoveryLog(t *testing.T) {
	const shard = "js-1"
	op := newJetStreamOpener(t)
	dbA, _ := openDB(t, t.TempDir())
	recA := becomeWriter(t, op, shard, dbA, 10, "member-a")

	rng := rand.New(rand.NewPCG(7, 7))
	batches := []*grocksdb.WriteBatch{randomBatch(rng, 0, 4<<10), randomBatch(rng, 1, 3<<20), randomBatch(rng, 2, 4<<10)}
	if n := len(batches[1].Data()); n <= 1<<20 {
		t.Fatalf("large batch only %d bytes", n)
	}
	commitAll(t, recA, batches)
	for i := 0; i < 5; i++ {
		commitAll(t, recA, []*grocksdb.WriteBatch{countBatch(i)})
	}

	dbB, _ := openDB(t, t.TempDir())
	recB := becomeWriter(t, op, shard, dbB, 11, "member-b")
	equalDumps(t, userDump(t, dbA), userDump(t, dbB))
	if got := getString(t, dbB, "count"); got != "5" {
		t.Fatalf("count %q on the new writer, want 5", got)
	}

	b := countBatch(99)
	c := recA.Commit(context.Background(), b)
	b.Destroy()
	if err := c.Wait(context.Background()); !errors.Is(err, wal.ErrFenced) {
		t.Fatalf("old writer's commit after handoff: %v, want ErrFenced", err)
	}
	commitAll(t, recB, []*grocksdb.WriteBatch{countBatch(100)})

	dbC, _ := openDB(t, t.TempDir())
	if got := replayInto(t, op, shard, dbC); got != recB.Position() {
		t.Fatalf("reader at %v, writer at %v", got, recB.Position())
	}
	equalDumps(t, dumpDB(t, dbB), dumpDB(t, dbC))
	if got := getString(t, dbC, "count"); got != "6" {
		t.Fatalf("count %q, want 6", got)
	}
}

// userDump is dumpDB without the position (two writers' DBs differ there).
func userDump(t testing.TB, db *grocksdb.DB) [][2]string {
	var out [][2]string
	for _, kv := range dumpDB(t, db) {
		if kv[0] != string(PositionKey) {
			out = append(out, kv)
		}
	}
	return out
}
