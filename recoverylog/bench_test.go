package recoverylog

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/benchround"
)

// BenchmarkReplay measures replaying a recovery log of ~128 MiB of Txn
// records (64 KiB batches of ~120-byte entries) from an embedded JetStream
// into a fresh RocksDB, against writing the same batches straight into a
// fresh RocksDB with the same options (RocksDB WAL disabled, no sync). The
// log is written once; each round writes the raw baseline into a fresh
// RocksDB and then replays the log into another, and the BENCH line has the
// medians over the rounds (the ratio's is of the per-round ratios). It
// prints one BENCH line and does its whole measurement once, whatever b.N.
func BenchmarkReplay(b *testing.B) {
	const (
		shard      = "bench"
		batchBytes = 64 << 10
		totalBytes = 128 << 20
	)
	b.StopTimer()
	op := newJetStreamOpener(b)

	// The log: a writer's fence, then the batches as Txn records.
	rng := rand.New(rand.NewPCG(42, 1))
	var batches [][]byte
	var total int
	for total < totalBytes {
		wb := grocksdb.NewWriteBatch()
		for n := 0; n < batchBytes; {
			k := fmt.Appendf(nil, "key-%012d", rng.Uint64N(1<<40))
			v := make([]byte, 100)
			for i := range v {
				v[i] = byte('a' + rng.IntN(26))
			}
			wb.Put(k, v)
			n += len(k) + len(v)
		}
		data := append([]byte(nil), wb.Data()...)
		wb.Destroy()
		batches = append(batches, data)
		total += len(data)
	}
	writerDB, closeWriterDB := openDB(b, b.TempDir())
	rec := becomeWriter(b, op, shard, writerDB, 1, "bench-writer")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	commits := make([]*Commit, 0, len(batches))
	for _, d := range batches {
		wb := grocksdb.WriteBatchFrom(d)
		commits = append(commits, rec.Commit(ctx, wb))
		wb.Destroy()
	}
	for i, c := range commits {
		if err := c.Wait(ctx); err != nil {
			b.Fatalf("commit %d: %v", i, err)
		}
	}
	want := rec.Position()
	if err := rec.Close(); err != nil {
		b.Fatal(err)
	}
	closeWriterDB() // no background compaction of it during the measurements

	mb := float64(total) / (1 << 20)
	benchround.Run(b, benchround.Spec{
		Name:     "recoverylog.replay",
		Params:   fmt.Sprintf("bytes=%d", total),
		Rounds:   5,
		Headline: []string{"ratio"},
	}, func(int) []benchround.Figure {
		// Raw baseline: the same batches straight into a fresh RocksDB.
		rawDir := b.TempDir()
		rawDB, closeRawDB := openDB(b, rawDir)
		wo := grocksdb.NewDefaultWriteOptions()
		wo.DisableWAL(true)
		defer wo.Destroy()
		start := time.Now()
		for i, d := range batches {
			wb := grocksdb.WriteBatchFrom(d)
			wb.Put(PositionKey, EncodePosition(Position{Seq: uint64(i)}))
			err := rawDB.Write(wo, wb)
			wb.Destroy()
			if err != nil {
				b.Fatal(err)
			}
		}
		raw := time.Since(start)
		closeRawDB()

		// Replay into a fresh RocksDB.
		b.StartTimer()
		replayDir := b.TempDir()
		replayDB, closeReplayDB := openDB(b, replayDir)
		start = time.Now()
		got := replayInto(b, op, shard, replayDB)
		replay := time.Since(start)
		b.StopTimer()
		closeReplayDB() // no background compaction of it during the next round
		if got != want {
			b.Fatalf("replayed to %v, writer at %v", got, want)
		}
		// The next round's DBs start from fresh directories; free this round's disk.
		_ = os.RemoveAll(rawDir)
		_ = os.RemoveAll(replayDir)

		rate, rawRate := mb/replay.Seconds(), mb/raw.Seconds()
		return []benchround.Figure{
			benchround.F("rate_mb_s", rate, 1), benchround.F("raw_mb_s", rawRate, 1),
			benchround.F("ratio", rate/rawRate, 2),
		}
	})
}
