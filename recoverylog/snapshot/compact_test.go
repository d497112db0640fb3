package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
)

// compactState is the state the compaction tests overwrite: 2,048 keys of
// 4 KiB incompressible values, 8 MiB.
const (
	compactKeys  = 2048
	compactValue = 4096
	compactState = compactKeys * compactValue
)

// overwrite writes every key once more, with fresh random values, through
// the writer's Recorder, then flushes the memtable to a table file when
// flush is set.
func overwrite(e *env, rng *rand.Rand, flush bool) {
	e.t.Helper()
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	v := make([]byte, compactValue)
	var last *recoverylog.Commit
	for k := 0; k < compactKeys; k++ {
		for i := range v {
			v[i] = byte(rng.Uint32())
		}
		wb.Put(fmt.Appendf(nil, "key-%06d", k), v)
		if k%64 == 63 {
			last = e.rec.Commit(e.ctx, wb)
			wb.Clear()
		}
	}
	if err := last.Wait(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	if flush {
		fo := grocksdb.NewDefaultFlushOptions()
		defer fo.Destroy()
		if err := e.db.Flush(fo); err != nil {
			e.t.Fatal(err)
		}
	}
}

// bloat leaves the state's latest version plus three overwritten ones: three
// table files in L0 (one short of RocksDB's compaction trigger) and the
// memtable, about 32 MiB for 8 MiB of live data.
func bloat(e *env) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 4; i++ {
		overwrite(e, rng, i < 3)
	}
}

// A database holding several times its live data is compacted before its
// checkpoint, so the snapshot holds about the live data; right after, a
// compact database is not compacted again.
func TestTakeCompactsABloatedDatabase(t *testing.T) {
	e := newEnv(t, "dir", nil)
	bloat(e)
	s := e.snapshotter(nil)
	res, err := s.Take(e.ctx, e.source())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Compacted {
		t.Fatalf("not compacted; snapshot of %d MiB for %d MiB of live data", res.SSTBytes>>20, compactState>>20)
	}
	if res.SSTBytes > compactState*5/4 {
		t.Fatalf("compacted, yet the snapshot holds %d KiB of table files for %d KiB of live data", res.SSTBytes>>10, compactState>>10)
	}
	res, err = s.Take(e.ctx, e.source())
	if err != nil {
		t.Fatal(err)
	}
	if res.Compacted {
		t.Fatalf("compacted again a database of %d KiB holding %d KiB of live data", res.SSTBytes>>10, compactState>>10)
	}
	e.checkRecovers()
}

// CompactAbove < 0 keeps the database as it is: the snapshot holds every
// version still there.
func TestTakeWithoutCompaction(t *testing.T) {
	e := newEnv(t, "dir", nil)
	bloat(e)
	s, err := snapshot.NewSnapshotter(snapshot.Config{
		Shard: e.shard, Store: e.store, Etcd: e.etcd, Prefix: testPrefix,
		ScratchDir: t.TempDir(), Logger: testLogger(t), CompactAbove: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Take(e.ctx, e.source())
	if err != nil {
		t.Fatal(err)
	}
	if res.Compacted || res.SSTBytes < 3*compactState {
		t.Fatalf("compacted %v, snapshot of %d KiB: want every version (%d KiB or more)", res.Compacted, res.SSTBytes>>10, 3*compactState>>10)
	}
	e.checkRecovers()
}

// A Take whose context ends abandons its compaction (a stopping primary is
// not held up by it), and leaves manual compactions enabled for the next.
func TestTakeWithEndedContextAbandonsCompaction(t *testing.T) {
	e := newEnv(t, "dir", nil)
	bloat(e)
	s := e.snapshotter(nil)
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if _, err := s.Take(ctx, e.source()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Take with a canceled context: %v, want context.Canceled", err)
	}
	res, err := s.Take(e.ctx, e.source())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Compacted || res.SSTBytes > compactState*5/4 {
		t.Fatalf("the next Take: compacted %v, %d KiB of table files for %d KiB of live data", res.Compacted, res.SSTBytes>>10, compactState>>10)
	}
}
