package snapshot_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/benchround"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	walimplsjs "github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// Benchmark shape: a live state of benchStateMB MiB (benchKeys keys of
// benchValue bytes), written in transactions of benchTxnKeys keys.
const (
	benchStateMB = 32
	benchValue   = 1024
	benchKeys    = benchStateMB << 20 / benchValue
	benchTxnKeys = 64
)

// benchIntervalDiv: a snapshot every state/benchIntervalDiv bytes of log
// (the shard's snapshot_interval_bytes; the default is 64 MiB against
// states of GiBs). Each snapshot flushes the memtable into an L0 file, and
// up to three L0 files wait for compaction, so a snapshot holds up to about
// 3/benchIntervalDiv of the state in overwritten versions.
const benchIntervalDiv = 16

// buildHistory writes `rounds` full overwrites of the key space through
// the env's Recorder, snapshotting every state/benchIntervalDiv bytes of
// log (unless s is nil), and returns the bytes of log written.
func buildHistory(b *testing.B, e *env, s *snapshot.Snapshotter, rounds int) int64 {
	interval := int64(benchStateMB<<20) / benchIntervalDiv
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	val := make([]byte, benchValue)
	rng := rand.New(rand.NewPCG(uint64(rounds), 1))
	var written, since int64
	for r := 0; r < rounds; r++ {
		var last *recoverylog.Commit
		for k := 0; k < benchKeys; k++ {
			// Incompressible values, as RocksDB would otherwise shrink them.
			for j := 0; j+8 <= len(val); j += 8 {
				binary.LittleEndian.PutUint64(val[j:], rng.Uint64())
			}
			wb.Put([]byte(fmt.Sprintf("key-%08d", k)), val)
			if (k+1)%benchTxnKeys == 0 || k == benchKeys-1 {
				n := int64(len(wb.Data()))
				last = e.rec.Commit(e.ctx, wb)
				wb.Clear()
				written += n
				since += n
				if s != nil && since >= interval {
					if err := last.Wait(e.ctx); err != nil {
						b.Fatal(err)
					}
					if _, err := s.Take(e.ctx, e.source()); err != nil {
						b.Fatal(err)
					}
					since = 0
				}
			}
		}
		if err := last.Wait(e.ctx); err != nil {
			b.Fatal(err)
		}
	}
	return written
}

// recoverSeconds times a fresh member's recovery (empty data dir: restore
// the newest snapshot, replay the log after it); with check, it also checks
// the result equals the live state.
func recoverSeconds(b *testing.B, e *env, check bool) float64 {
	dir := filepath.Join(b.TempDir(), "fresh")
	defer os.RemoveAll(dir)
	start := time.Now()
	res, err := snapshot.Recover(e.ctx, snapshot.RecoverConfig{
		Shard: e.shard, Dir: dir, Store: e.store, Etcd: e.etcd, Prefix: testPrefix, Opener: e.opener,
	})
	d := time.Since(start).Seconds()
	if err != nil {
		b.Fatal(err)
	}
	if res.Manifest == nil {
		b.Fatal("recovered without a snapshot")
	}
	if check {
		b.Logf("restored snapshot %s: %d files, %d MiB; replayed %d records after it",
			res.Manifest.ID, len(res.Manifest.Files), res.Manifest.Size()>>20, res.Position.Seq-res.Manifest.Position.Seq)
		db := openDB(b, dir)
		got, want := dump(b, db), dump(b, e.db)
		db.Close()
		if d := diffDumps(got, want); d != "" {
			b.Fatalf("recovered state differs: %s", d)
		}
	}
	return d
}

// BenchmarkRecovery: time for a fresh member to rebuild a shard whose
// history is 1x vs 10x its live state (the same keys overwritten), with
// snapshots every state/16 of log and truncation, on JetStream (WAL and
// object store). Both histories are built first; each round then times one
// recovery of each (which goes first flips every round) and their ratio,
// and the BENCH line has the medians over the rounds.
func BenchmarkRecovery(b *testing.B) {
	var envs [2]*env
	for i, rounds := range []int{1, 10} {
		url := natstest.Start(b)
		e := newEnvStore(b, newJetStreamStore(b, url), walimplsjs.NewBuilder(walimplsjs.Config{URL: url}))
		s := e.snapshotter(nil)
		t0 := time.Now()
		written := buildHistory(b, e, s, rounds)
		b.Logf("history %dx: %d MiB of log built in %s", rounds, written>>20, time.Since(t0).Round(time.Millisecond))
		envs[i] = e
	}
	res := benchround.Run(b, benchround.Spec{
		Name:     "recovery",
		Params:   fmt.Sprintf("history_x=10 state_mb=%d", benchStateMB),
		Rounds:   5,
		Headline: []string{"ratio"},
	}, func(r int) []benchround.Figure {
		var secs [2]float64
		if r%2 == 0 {
			secs[0] = recoverSeconds(b, envs[0], r == 0)
			secs[1] = recoverSeconds(b, envs[1], r == 0)
		} else {
			secs[1] = recoverSeconds(b, envs[1], false)
			secs[0] = recoverSeconds(b, envs[0], false)
		}
		return []benchround.Figure{
			benchround.F("seconds_1x", secs[0], 3), benchround.F("seconds_10x", secs[1], 3),
			benchround.F("ratio", secs[1]/secs[0], 2),
		}
	})
	b.ReportMetric(res.Median("ratio"), "ratio")
}

// BenchmarkSnapshotIncremental: share of SST bytes the second snapshot
// did not upload again after a small change. (A snapshot that coincides
// with an L0→L1 compaction re-uploads the files the compaction rewrote;
// with uniformly random overwrites that is most of the state, about one
// snapshot in four.)
//
// Each round builds its own state on a fresh server and takes both
// snapshots; the BENCH line has the median over the rounds, and the spread
// shows the rounds that coincided with a compaction.
func BenchmarkSnapshotIncremental(b *testing.B) {
	res := benchround.Run(b, benchround.Spec{
		Name:     "snapshot.incremental",
		Rounds:   5,
		Headline: []string{"reused_ratio"},
	}, func(int) []benchround.Figure {
		return []benchround.Figure{benchround.F("reused_ratio", snapshotReusedRatio(b), 3)}
	})
	b.ReportMetric(res.Median("reused_ratio"), "reused_ratio")
}

// snapshotReusedRatio is one round of BenchmarkSnapshotIncremental.
func snapshotReusedRatio(b *testing.B) float64 {
	url := natstest.Start(b)
	e := newEnvStore(b, newJetStreamStore(b, url), walimplsjs.NewBuilder(walimplsjs.Config{URL: url}))
	s := e.snapshotter(nil)
	buildHistory(b, e, nil, 1) // the state, in the memtable
	first, err := s.Take(e.ctx, e.source())
	if err != nil {
		b.Fatal(err)
	}
	// A small change: 100 keys.
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	for k := 0; k < 100; k++ {
		wb.Put([]byte(fmt.Sprintf("key-%08d", k*97)), bytes.Repeat([]byte("z"), benchValue))
	}
	if err := e.rec.Commit(e.ctx, wb).Wait(e.ctx); err != nil {
		b.Fatal(err)
	}
	second, err := s.Take(e.ctx, e.source())
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("first snapshot: %d SST bytes uploaded; second: %d of %d SST bytes reused, %d bytes uploaded",
		first.UploadedBytes, second.ReusedBytes, second.SSTBytes, second.UploadedBytes)
	return float64(second.ReusedBytes) / float64(second.SSTBytes)
}
