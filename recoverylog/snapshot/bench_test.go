package snapshot_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/internal/benchround"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	"github.com/consumerd/consumerd/shard"
	walimplsjs "github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// Benchmark shape: a live state of benchStateMB() MiB of unique keys with
// benchValue-byte incompressible values, written in transactions of
// benchTxnKeys keys, with a snapshot every benchIntervalMB of log (the
// shard's snapshot_interval_bytes default) and a tail of benchTailMB of log
// after the newest snapshot (at most one interval in production).
const (
	benchValue      = 1024
	benchTxnKeys    = 256
	benchIntervalMB = 64
	benchTailMB     = 64
	// benchDefaultStateMB: the largest state whose builds fit the package's
	// budget (2.5 min with one round) on 2 cores, where uploading the
	// snapshots (about 3x the log, RocksDB's compaction output) bounds the
	// build, which grows with the state. Override with
	// $CONSUMERD_BENCH_STATE_MB.
	benchDefaultStateMB = 128
	envStateMB          = "CONSUMERD_BENCH_STATE_MB"
)

// benchStateMB is $CONSUMERD_BENCH_STATE_MB, else benchDefaultStateMB.
func benchStateMB(b *testing.B) int {
	s := os.Getenv(envStateMB)
	if s == "" {
		return benchDefaultStateMB
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q is not a positive integer", envStateMB, s)
	}
	return n
}

// history is one shard built for recovery: its env (writer DB, JetStream
// WAL and object store) and what building it took.
type history struct {
	e     *env
	url   string
	store *snapshot.JetStreamStore
	stats *grocksdb.Options // the writer DB's, with statistics enabled

	logBytes     int64 // log written before the tail
	tailBytes    int64
	snapshots    int
	uploaded     int64 // sum of the snapshots' UploadedBytes
	uploadedSST  int64 // of which SST files
	newSST       int64 // SST bytes no earlier snapshot named
	rocksWritten int64 // flush + compaction output during the history
	// Sizes of the snapshots taken after the first overwrite of the state
	// (steady state), and of the last.
	minSnap, maxSnap, lastSnap int64
	sizes                      []int64 // of every snapshot, in order
	compactions                int     // snapshots that compacted first
	build, takeTime            time.Duration
}

// buildHistory starts a server and a shard and writes `rounds` full
// overwrites of the key space (each in a fresh random order) through the
// shard's Recorder, snapshotting as a primary does, on a background
// goroutine while the writes go on, after every benchIntervalMB of log.
// The writer waits at an interval's end for the previous snapshot to
// finish, so snapshots keep the interval even though uploading is slower
// than writing here. It takes a last snapshot at the end of the history,
// then writes benchTailMB more of overwrites without one.
func buildHistory(b *testing.B, stateMB, rounds int) *history {
	url := natstest.Start(b)
	st := newJetStreamStore(b, url)
	e := newEnvStore(b, st, walimplsjs.NewBuilder(walimplsjs.Config{URL: url}))
	h := &history{e: e, url: url, store: st, stats: withStatistics(b, e)}
	s := e.snapshotter(nil)
	keys := stateMB << 20 / benchValue
	rng := rand.New(rand.NewPCG(uint64(rounds), 1))
	w := newWriter(e, rng)
	defer w.close()

	seen := map[string]bool{} // SST objects of the snapshots so far
	// take snapshots; steady: past the first write of the state.
	take := func(steady bool) error {
		t0 := time.Now()
		res, err := s.Take(e.ctx, e.source())
		if err != nil {
			return fmt.Errorf("history %dx: snapshot %d: %w", rounds, h.snapshots+1, err)
		}
		h.takeTime += time.Since(t0)
		h.snapshots++
		h.uploaded += res.UploadedBytes
		h.uploadedSST += res.SSTBytes - res.ReusedBytes
		for _, f := range res.Manifest.Files {
			if strings.HasSuffix(f.Name, ".sst") && !seen[f.Object] {
				seen[f.Object] = true
				h.newSST += f.Size
			}
		}
		h.lastSnap = res.Manifest.Size()
		h.sizes = append(h.sizes, h.lastSnap)
		if res.Compacted {
			h.compactions++
		}
		if steady {
			if h.minSnap == 0 || h.lastSnap < h.minSnap {
				h.minSnap = h.lastSnap
			}
			h.maxSnap = max(h.maxSnap, h.lastSnap)
		}
		return nil
	}
	due := make(chan bool) // unbuffered: a send waits for the previous Take
	errc := make(chan error, 1)
	go func() {
		var err error
		for steady := range due {
			if err == nil {
				err = take(steady)
			}
		}
		errc <- err
	}()
	t0 := time.Now()
	interval := int64(benchIntervalMB << 20)
	var since int64
	for r := 0; r < rounds; r++ {
		for _, k := range rng.Perm(keys) {
			n := w.put(k)
			h.logBytes += n
			if since += n; since >= interval {
				due <- r > 0
				since = 0
			}
		}
	}
	h.logBytes += w.flush()
	close(due)
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	if err := w.wait(); err != nil {
		b.Fatalf("history %dx: commit: %v", rounds, err)
	}
	if err := take(rounds > 1); err != nil {
		b.Fatal(err)
	}
	h.rocksWritten = rocksWrittenBytes(b, h.stats)
	lsm := levels(e.db) // compactions the last flush triggered may be running
	h.build = time.Since(t0)
	// The tail: overwrites of random keys, no snapshot.
	for h.tailBytes < benchTailMB<<20 {
		h.tailBytes += w.put(rng.IntN(keys))
	}
	h.tailBytes += w.flush()
	if err := w.wait(); err != nil {
		b.Fatalf("history %dx: tail: %v", rounds, err)
	}
	b.Logf("history %dx: %d MiB of log, %d snapshots uploading %d MiB (%s in Take) in %s; last snapshot %d MiB (LSM then %s); tail %d MiB",
		rounds, h.logBytes>>20, h.snapshots, h.uploaded>>20, h.takeTime.Round(time.Millisecond), h.build.Round(time.Millisecond),
		h.lastSnap>>20, lsm, h.tailBytes>>20)
	return h
}

// mibs is ns in MiB.
func mibs(ns []int64) []int64 {
	out := make([]int64, len(ns))
	for i, n := range ns {
		out[i] = n >> 20
	}
	return out
}

// levels is db's LSM shape, e.g. "L0 2 files 130 MB, L1 3 files 131 MB".
func levels(db *grocksdb.DB) string {
	var out []string
	for _, line := range strings.Split(db.GetProperty("rocksdb.levelstats"), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[1] != "0" && f[0] != "Level" {
			out = append(out, fmt.Sprintf("L%s %s files %s MB", f[0], f[1], f[2]))
		}
	}
	return strings.Join(out, ", ")
}

// writer commits transactions of benchTxnKeys keys through a Recorder
// without waiting for each: an applier goroutine waits for (and so
// applies) them in order while the next ones are in flight.
type writer struct {
	e     *env
	rng   *rand.Rand
	wb    *grocksdb.WriteBatch
	val   []byte
	n     int
	last  *recoverylog.Commit
	apply chan *recoverylog.Commit
	done  chan struct{}
}

func newWriter(e *env, rng *rand.Rand) *writer {
	w := &writer{e: e, rng: rng, wb: grocksdb.NewWriteBatch(), val: make([]byte, benchValue),
		apply: make(chan *recoverylog.Commit, 64), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for c := range w.apply {
			// An error breaks the Recorder: wait reports it.
			_ = c.Wait(e.ctx)
		}
	}()
	return w
}

// put adds key k with a fresh incompressible value (RocksDB would shrink
// a compressible one) and returns the bytes of log committed, if it
// completed a transaction.
func (w *writer) put(k int) int64 {
	for j := 0; j+8 <= len(w.val); j += 8 {
		binary.LittleEndian.PutUint64(w.val[j:], w.rng.Uint64())
	}
	w.wb.Put(benchKey(k), w.val)
	if w.n++; w.n < benchTxnKeys {
		return 0
	}
	return w.flush()
}

// flush commits the open transaction, if any, and returns its size.
func (w *writer) flush() int64 {
	if w.n == 0 {
		return 0
	}
	n := int64(len(w.wb.Data()))
	w.last = w.e.rec.Commit(w.e.ctx, w.wb)
	w.apply <- w.last
	w.wb.Clear()
	w.n = 0
	return n
}

// wait applies every commit so far and returns the first error.
func (w *writer) wait() error {
	if w.last == nil {
		return nil
	}
	return w.last.Wait(w.e.ctx)
}

func (w *writer) close() {
	close(w.apply)
	<-w.done
	w.wb.Destroy()
}

func benchKey(k int) []byte { return fmt.Appendf(nil, "key-%08d", k) }

// withStatistics reopens e's writer DB with RocksDB statistics enabled
// (otherwise the production options, as openDB's) and returns the options
// whose statistics count its flush and compaction output.
func withStatistics(b *testing.B, e *env) *grocksdb.Options {
	e.stopWriter()
	e.db.Close()
	opts := shard.DefaultDBOptions()
	opts.SetCreateIfMissing(true)
	opts.EnableStatistics()
	b.Cleanup(opts.Destroy) // the DB keeps its own reference to the statistics
	db, err := grocksdb.OpenDb(opts, e.dir)
	if err != nil {
		b.Fatalf("reopen rocksdb %s with statistics: %v", e.dir, err)
	}
	e.db = db
	e.term++ // a new writer, fencing the one before
	e.startWriter()
	return opts
}

// rocksWrittenBytes is what RocksDB wrote to SST files so far: flush plus
// compaction output, from the statistics tickers.
func rocksWrittenBytes(b *testing.B, opts *grocksdb.Options) int64 {
	var total int64
	found := 0
	for _, line := range strings.Split(opts.GetStatisticsString(), "\n") {
		f := strings.Fields(line)
		if len(f) == 4 && (f[0] == "rocksdb.flush.write.bytes" || f[0] == "rocksdb.compact.write.bytes") && f[1] == "COUNT" {
			n, err := strconv.ParseInt(f[3], 10, 64)
			if err != nil {
				b.Fatalf("rocksdb statistics: %q: %v", line, err)
			}
			total += n
			found++
		}
	}
	if found != 2 {
		b.Fatalf("rocksdb statistics: flush and compaction write bytes not found")
	}
	return total
}

// waitIdle waits until db runs and owes no flush or compaction, so a
// writer's background work does not slow the recoveries timed after it.
func waitIdle(b *testing.B, db *grocksdb.DB) {
	waitfor.Until(b, 5*time.Minute, "rocksdb to finish its flushes and compactions", func() (bool, string) {
		var busy []string
		for _, p := range []string{"rocksdb.num-running-compactions", "rocksdb.num-running-flushes", "rocksdb.compaction-pending", "rocksdb.mem-table-flush-pending"} {
			n, ok := db.GetIntProperty(p)
			if !ok {
				b.Fatalf("rocksdb property %s unavailable", p)
			}
			if n > 0 {
				busy = append(busy, fmt.Sprintf("%s %d", p, n))
			}
		}
		return len(busy) == 0, strings.Join(busy, ", ")
	})
}

// recovery is one timed recovery of a history and a raw copy of the
// snapshot it restored.
type recovery struct {
	total, restore, raw float64 // seconds
	restored            int64   // bytes of the snapshot
}

// recoverOnce times a fresh member's recovery of h (empty data dir:
// restore the newest snapshot, replay the tail after it) and a raw copy of
// the same snapshot objects with plain nats.go, in the order rawFirst
// says; with check, it also checks the recovered state equals the live
// one.
func recoverOnce(b *testing.B, h *history, rawFirst, check bool) recovery {
	var rc recovery
	var m *snapshot.Manifest
	if rawFirst {
		ptr, ok, err := snapshot.LoadPointer(h.e.ctx, h.e.etcd, testPrefix, h.e.shard)
		if err != nil || !ok {
			b.Fatalf("load pointer: %v (found %v)", err, ok)
		}
		if m, err = snapshot.LoadManifest(h.e.ctx, h.store, ptr.Manifest); err != nil {
			b.Fatal(err)
		}
		rc.raw = rawCopySeconds(b, h, m)
	}
	dir := filepath.Join(b.TempDir(), "fresh")
	defer os.RemoveAll(dir)
	start := time.Now()
	res, err := snapshot.Recover(h.e.ctx, snapshot.RecoverConfig{
		Shard: h.e.shard, Dir: dir, Store: h.e.store, Etcd: h.e.etcd, Prefix: testPrefix, Opener: h.e.opener,
	})
	rc.total = time.Since(start).Seconds()
	if err != nil {
		b.Fatalf("recover: %v", err)
	}
	if res.Manifest == nil {
		b.Fatal("recovered without a snapshot")
	}
	if m != nil && m.ID != res.Manifest.ID {
		b.Fatalf("recovered snapshot %s, copied %s", res.Manifest.ID, m.ID)
	}
	rc.restore = res.RestoreDuration.Seconds()
	rc.restored = res.Manifest.Size()
	if !rawFirst {
		rc.raw = rawCopySeconds(b, h, res.Manifest)
	}
	if check {
		b.Logf("restored snapshot %s: %d files, %d MiB in %.3fs; replayed %d records after it in %.3fs",
			res.Manifest.ID, len(res.Manifest.Files), rc.restored>>20, rc.restore,
			res.Position.Seq-res.Manifest.Position.Seq, rc.total-rc.restore)
		db := openDB(b, dir)
		d := diffDBs(b, db, h.e.db)
		db.Close()
		if d != "" {
			b.Fatalf("recovered state differs from the live state: %s", d)
		}
	}
	return rc
}

// rawCopySeconds times downloading m's objects from the object store with
// plain nats.go into files of a temporary directory: the floor for
// Restore.
func rawCopySeconds(b *testing.B, h *history, m *snapshot.Manifest) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	nc, err := nats.Connect(h.url)
	if err != nil {
		b.Fatalf("raw copy: connect: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatalf("raw copy: %v", err)
	}
	obs, err := js.ObjectStore(ctx, h.store.Bucket())
	if err != nil {
		b.Fatalf("raw copy: bucket %s: %v", h.store.Bucket(), err)
	}
	dir := filepath.Join(b.TempDir(), "raw")
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	for _, f := range m.Files {
		r, err := obs.Get(ctx, f.Object)
		if err != nil {
			b.Fatalf("raw copy: get %s: %v", f.Object, err)
		}
		out, err := os.Create(filepath.Join(dir, f.Name))
		if err != nil {
			b.Fatal(err)
		}
		_, err = io.Copy(out, r)
		r.Close()
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			b.Fatalf("raw copy: %s: %v", f.Object, err)
		}
	}
	return time.Since(start).Seconds()
}

// diffDBs compares two databases key by key (streaming: the states are
// GiBs) and describes the first difference, or returns "".
func diffDBs(b *testing.B, got, want *grocksdb.DB) string {
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	gi, wi := got.NewIterator(ro), want.NewIterator(ro)
	defer gi.Close()
	defer wi.Close()
	n := 0
	wi.SeekToFirst()
	for gi.SeekToFirst(); gi.Valid() && wi.Valid(); gi.Next() {
		gk, wk := gi.Key().Data(), wi.Key().Data()
		if !bytes.Equal(gk, wk) || !bytes.Equal(gi.Value().Data(), wi.Value().Data()) {
			return fmt.Sprintf("entry %d: got key %q, want %q (or their values differ)", n, gk, wk)
		}
		wi.Next()
		n++
	}
	for _, it := range []*grocksdb.Iterator{gi, wi} {
		if err := it.Err(); err != nil {
			b.Fatalf("iterating: %v", err)
		}
	}
	if gi.Valid() != wi.Valid() {
		return fmt.Sprintf("after %d equal entries, got more: %v, want more: %v", n, gi.Valid(), wi.Valid())
	}
	return ""
}

// BenchmarkRecovery: time for a fresh member to rebuild a shard (restore
// the newest snapshot, replay the benchTailMB of log after it) whose
// history is 1x vs 10x its live state (the same keys overwritten), with a
// snapshot every benchIntervalMB of log and truncation, on JetStream (WAL
// and object store). Goals: seconds_10x/seconds_1x ≤ 1.3 (recovery bound
// by the state, not the history), and the restore phase alone at ≥ 0.7 of
// raw_copy_mb_s, a plain nats.go download of the same objects into files,
// measured in the same round (restore_ratio; restore and raw rates are
// over both histories' snapshots, whose sizes the line gives too: the 10x
// one holds the overwritten versions RocksDB has not compacted away yet,
// in L0 files of up to an interval each and in L1 over L2, so the smaller
// the state, the further the ratio is from 1).
//
// Both histories are built first; each round times one recovery of each
// and a raw copy of each snapshot (which goes first flips every round).
// Round 0 checks the recovered states equal the live ones.
//
// It also prints BENCH snapshot.amplification, one figure of the 10x build
// (a steady state of overwrites with a snapshot every interval; rounds=1):
// the bytes all its snapshots uploaded (files and manifests) against the
// SST bytes RocksDB wrote (flush and compaction output, from its
// statistics) in that time, which a file-level incremental snapshot
// uploads at most once each. Goal ≤ 1.1; above 1, files went up twice or
// the non-SST files weigh.
func BenchmarkRecovery(b *testing.B) {
	stateMB := benchStateMB(b)
	var hs [2]*history
	for i, rounds := range []int{1, 10} {
		hs[i] = buildHistory(b, stateMB, rounds)
	}
	t0 := time.Now()
	for _, h := range hs {
		waitIdle(b, h.e.db)
	}
	b.Logf("writers' compactions done %s after the builds", time.Since(t0).Round(time.Millisecond))
	h := hs[1]
	ampl := float64(h.uploaded) / float64(h.rocksWritten)
	b.Logf("amplification: %d snapshots uploaded %d MiB: %d MiB of SSTs (%d MiB more than the SSTs first named then: uploaded twice), %d KiB of other files and manifests; RocksDB wrote %d MiB of SSTs",
		h.snapshots, h.uploaded>>20, h.uploadedSST>>20, (h.uploadedSST-h.newSST)>>20, (h.uploaded-h.uploadedSST)>>10, h.rocksWritten>>20)
	b.Logf("steady-state snapshots of the %d MiB state: %d to %d MiB (the LSM's overwritten versions); %d of %d snapshots compacted first", stateMB, h.minSnap>>20, h.maxSnap>>20, h.compactions, h.snapshots)
	b.Logf("snapshot sizes, MiB, in order: %v", mibs(h.sizes))
	fmt.Printf("BENCH snapshot.amplification state_mb=%d history_x=10 rounds=1 uploaded_mb=%d log_mb=%d rocksdb_written_mb=%d ratio=%.3f min=%.3f max=%.3f\n",
		stateMB, h.uploaded>>20, h.logBytes>>20, h.rocksWritten>>20, ampl, ampl, ampl)

	res := benchround.Run(b, benchround.Spec{
		Name:     "recovery",
		Params:   fmt.Sprintf("state_mb=%d tail_mb=%d history_x=10", stateMB, benchTailMB),
		Rounds:   5,
		Headline: []string{"ratio"},
	}, func(r int) []benchround.Figure {
		var rc [2]recovery
		for j := range 2 {
			i := j ^ r%2 // 1x first in even rounds
			rc[i] = recoverOnce(b, hs[i], r%2 == 1, r == 0)
		}
		mbs := func(n int64, s float64) float64 { return float64(n) / (1 << 20) / s }
		b.Logf("round %d: 1x restore %.0f MB/s, raw copy %.0f MB/s, replay %.3fs; 10x restore %.0f MB/s, raw copy %.0f MB/s, replay %.3fs", r+1,
			mbs(rc[0].restored, rc[0].restore), mbs(rc[0].restored, rc[0].raw), rc[0].total-rc[0].restore,
			mbs(rc[1].restored, rc[1].restore), mbs(rc[1].restored, rc[1].raw), rc[1].total-rc[1].restore)
		restoreS := rc[0].restore + rc[1].restore
		rawS := rc[0].raw + rc[1].raw
		mb := float64(rc[0].restored+rc[1].restored) / (1 << 20)
		return []benchround.Figure{
			benchround.F("seconds_1x", rc[0].total, 3), benchround.F("seconds_10x", rc[1].total, 3),
			benchround.F("ratio", rc[1].total/rc[0].total, 2),
			benchround.F("restore_mb_s", mb/restoreS, 0), benchround.F("raw_copy_mb_s", mb/rawS, 0),
			benchround.F("restore_ratio", rawS/restoreS, 2),
			benchround.F("snapshot_mb_1x", float64(rc[0].restored)/(1<<20), 0),
			benchround.F("snapshot_mb_10x", float64(rc[1].restored)/(1<<20), 0),
		}
	})
	b.ReportMetric(res.Median("ratio"), "ratio")
	b.ReportMetric(ampl, "amplification")
}
