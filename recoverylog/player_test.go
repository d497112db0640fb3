package recoverylog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// becomeWriter replays channel into db, hands off with term and returns
// the Recorder (closed at cleanup) and its WAL.
func becomeWriter(t testing.TB, op wal.Opener, shard string, db *grocksdb.DB, term uint64, author string) *Recorder {
	t.Helper()
	log := openWAL(t, op, Channel(shard), 0)
	r := startPlayer(t, PlayerConfig{Log: log, DB: db, ShardID: shard})
	waitCaughtUp(t, r)
	w := openWAL(t, op, Channel(shard), term)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, err := r.p.Handoff(ctx, w, term, author)
	if err != nil {
		t.Fatalf("handoff term %d: %v", term, err)
	}
	if err := r.wait(t); err != nil {
		t.Fatalf("Play after handoff returned %v, want nil", err)
	}
	if got := rec.Position(); got.Term != term || got != r.p.Position() {
		t.Fatalf("recorder starts at %v, player ended at %v, want term %d", got, r.p.Position(), term)
	}
	t.Cleanup(func() { _ = rec.Close() })
	return rec
}

// replayInto replays shard's log into db until caught up and stops.
func replayInto(t testing.TB, op wal.Opener, shard string, db *grocksdb.DB) Position {
	t.Helper()
	r := startPlayer(t, PlayerConfig{Log: openWAL(t, op, Channel(shard), 0), DB: db, ShardID: shard})
	waitCaughtUp(t, r)
	if err := r.stop(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Play returned %v, want context.Canceled", err)
	}
	return r.p.Position()
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func countBatch(i int) *grocksdb.WriteBatch {
	wb := grocksdb.NewWriteBatch()
	wb.Merge([]byte("count"), []byte("1"))
	wb.Put([]byte(fmt.Sprintf("txn-%03d", i)), []byte(fmt.Sprintf("value-%d", i)))
	PutOffset(wb, "words/0001", SourceOffset{ID: message.MessageID(i)})
	return wb
}

func getString(t *testing.T, db *grocksdb.DB, key string) string {
	t.Helper()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	v, err := db.GetBytes(ro, []byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return string(v)
}

func TestReplayEquivalence(t *testing.T) {
	env := newMemEnv(t)
	dbA, _ := openDB(t, t.TempDir())
	rec := becomeWriter(t, env.opener, "eq", dbA, 7, "member-a")
	if p := rec.Position(); p.Seq != 1 || p.Term != 7 {
		t.Fatalf("after handoff on an empty log: %v, want seq 1 (the fence) term 7", p)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	var batches []*grocksdb.WriteBatch
	records := 0
	for i := 0; i < 40; i++ {
		size := 8 << 10
		if i == 20 {
			size = 5 << 19 // 2.5 MiB: three chunks
		}
		b := randomBatch(rng, i, size)
		records += (len(b.Data()) + DefaultChunkSize - 1) / DefaultChunkSize
		batches = append(batches, b)
	}
	if records < 42 {
		t.Fatalf("the large batch was not chunked: %d records for 40 txns", records)
	}
	commitAll(t, rec, batches)
	posA := rec.Position()
	if posA.Seq != uint64(1+records) {
		t.Fatalf("recorder at seq %d, want %d", posA.Seq, 1+records)
	}
	stored, err := LoadPosition(dbA)
	if err != nil || stored != posA {
		t.Fatalf("stored position %v (%v), recorder position %v", stored, err, posA)
	}

	dirB := t.TempDir()
	dbB, closeB := openDB(t, dirB)
	if got := replayInto(t, env.opener, "eq", dbB); got != posA {
		t.Fatalf("player position %v, recorder %v", got, posA)
	}
	equalDumps(t, dumpDB(t, dbA), dumpDB(t, dbB))
	offs, err := LoadOffsets(dbB)
	if err != nil || len(offs) != 1 || offs["words/0000"].ID != 1039 {
		t.Fatalf("offsets %v (%v), want words/0000=1039", offs, err)
	}

	// Restart on the same directory: nothing to replay, same state.
	before := dumpDB(t, dbB)
	closeB()
	dbB2, _ := openDB(t, dirB)
	if got := replayInto(t, env.opener, "eq", dbB2); got != posA {
		t.Fatalf("after restart at %v, want %v", got, posA)
	}
	equalDumps(t, before, dumpDB(t, dbB2))
}

func TestTailingPlayerFollowsRecorder(t *testing.T) {
	env := newMemEnv(t)
	dbA, _ := openDB(t, t.TempDir())
	rec := becomeWriter(t, env.opener, "tail", dbA, 1, "a")
	dbB, _ := openDB(t, t.TempDir())
	r := startPlayer(t, PlayerConfig{Log: openWAL(t, env.opener, Channel("tail"), 0), DB: dbB, ShardID: "tail"})
	waitCaughtUp(t, r)
	for i := 0; i < 30; i++ {
		b := countBatch(i)
		c := rec.Commit(context.Background(), b)
		b.Destroy()
		if err := c.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	waitPosition(t, r, rec.Position().Seq)
	if got := r.p.Position(); got != rec.Position() {
		t.Fatalf("tailing player at %v, recorder at %v", got, rec.Position())
	}
	if got := getString(t, dbB, "count"); got != "30" {
		t.Fatalf("tailing player count %q, want 30", got)
	}
	equalDumps(t, dumpDB(t, dbA), dumpDB(t, dbB))
}

// TestZombieWriter: an old recorder keeps committing after a newer handoff;
// its appends fail with ErrFenced, and forged records (written through an
// unfenced WAL, as on a backend without conditional appends) that do not
// extend the chain are ignored by every reader.
func TestZombieWriter(t *testing.T) {
	const shard = "zombie"
	env := newMemEnv(t)
	dbA, _ := openDB(t, t.TempDir())
	recA := becomeWriter(t, env.opener, shard, dbA, 1, "a")
	for i := 0; i < 5; i++ {
		commitAll(t, recA, []*grocksdb.WriteBatch{countBatch(i)})
	}
	forger := openWAL(t, env.opener, Channel(shard), 0)
	forge := func(pos Position, term uint64, key string) Position {
		wb := grocksdb.NewWriteBatch()
		defer wb.Destroy()
		wb.Merge([]byte("count"), []byte("1"))
		wb.Put([]byte(key), []byte("forged"))
		recs, next := EncodeTxn(pos, term, wb.Data(), 0)
		for _, b := range recs {
			if _, err := forger.Append(context.Background(), message.MutableMessage{Payload: b}); err != nil {
				t.Fatalf("forge: %v", err)
			}
		}
		return next
	}

	// While B hands off, a record of A's chain slips in just before B's
	// first fence: it extends the chain, so it is committed and applied, and
	// B's fence is retried from after it.
	posA := recA.Position()
	var slipped atomic.Bool
	env.builder.SetAppendHook(func(ch string, m *message.MutableMessage, st memory.Stage) error {
		if st == memory.BeforeStore && m.Properties["recoverylog"] == "fence" && slipped.CompareAndSwap(false, true) {
			forge(posA, 1, "slipped")
		}
		return nil
	})
	dbB, _ := openDB(t, t.TempDir())
	skippedBefore := counterValue(skippedRecordsTotal.WithLabelValues(shard, string(SkipDuplicate)))
	recB := becomeWriter(t, env.opener, shard, dbB, 2, "b")
	env.builder.SetAppendHook(nil)
	if !slipped.Load() {
		t.Fatal("the slip-in hook never ran")
	}
	if got := getString(t, dbB, "slipped"); got != "forged" {
		t.Fatalf("slipped-in record not applied by the new writer: %q", got)
	}
	if d := counterValue(skippedRecordsTotal.WithLabelValues(shard, string(SkipDuplicate))) - skippedBefore; d < 1 {
		t.Fatalf("the first fence (stale) was not skipped as a duplicate (delta %v)", d)
	}
	if p := recB.Position(); p.Seq != posA.Seq+2 || p.Term != 2 {
		t.Fatalf("B starts at %v, want seq %d (slipped record + fence) term 2", p, posA.Seq+2)
	}

	// A is a zombie now: fenced at the backend.
	zb := countBatch(100)
	c := recA.Commit(context.Background(), zb)
	zb.Destroy()
	if err := c.Wait(context.Background()); !errors.Is(err, wal.ErrFenced) {
		t.Fatalf("zombie commit: %v, want ErrFenced", err)
	}
	zb = countBatch(101)
	c2 := recA.Commit(context.Background(), zb)
	zb.Destroy()
	if err := c2.Wait(context.Background()); !errors.Is(err, wal.ErrFenced) || !errors.Is(recA.Err(), wal.ErrFenced) {
		t.Fatalf("later zombie commit: %v (recorder %v), want ErrFenced", err, recA.Err())
	}

	// Forged records interleaved with B's commits: A's branch, and term-1
	// records that would extend B's chain.
	zombieNext := forge(recA.Position(), 1, "zombie-branch")
	for i := 10; i < 16; i++ {
		forge(recB.Position(), 1, fmt.Sprintf("zombie-fenced-%d", i))
		zombieNext = forge(zombieNext, 1, fmt.Sprintf("zombie-branch-%d", i))
		commitAll(t, recB, []*grocksdb.WriteBatch{countBatch(i)})
	}
	fencedBefore := counterValue(skippedRecordsTotal.WithLabelValues(shard, string(SkipFenced)))
	dbC, _ := openDB(t, t.TempDir())
	if got := replayInto(t, env.opener, shard, dbC); got != recB.Position() {
		t.Fatalf("reader at %v, writer B at %v", got, recB.Position())
	}
	equalDumps(t, dumpDB(t, dbB), dumpDB(t, dbC))
	st := userState(t, dbC)
	if st["count"] != "12" { // 5 of A, 1 slipped in, 6 of B
		t.Fatalf("count %q, want 12 (state %v)", st["count"], sortedKeys(st))
	}
	for _, k := range sortedKeys(st) {
		if len(k) > 6 && k[:6] == "zombie" {
			t.Fatalf("zombie record %q applied", k)
		}
	}
	if d := counterValue(skippedRecordsTotal.WithLabelValues(shard, string(SkipFenced))) - fencedBefore; d < 12 {
		t.Fatalf("only %v records skipped as fenced, want ≥ 12", d)
	}
}

// TestCrashBetweenAckAndApply: the log stores a commit but its ack is lost
// (the recorder breaks without applying it); a replay on restart applies it
// exactly once, although the retried append stored it several times.
func TestCrashBetweenAckAndApply(t *testing.T) {
	const shard = "crash"
	env := newMemEnv(t)
	dir := t.TempDir()
	db, closeDB := openDB(t, dir)
	rec := becomeWriter(t, env.opener, shard, db, 3, "a")
	for i := 0; i < 5; i++ {
		commitAll(t, rec, []*grocksdb.WriteBatch{countBatch(i)})
	}
	var stored atomic.Int32
	lostAck := errors.New("injected: ack lost")
	env.builder.SetAppendHook(func(ch string, m *message.MutableMessage, st memory.Stage) error {
		if st == memory.AfterStore && m.Properties["recoverylog"] == "txn" {
			stored.Add(1)
			return lostAck
		}
		return nil
	})
	b := countBatch(5)
	c := rec.Commit(context.Background(), b)
	b.Destroy()
	err := c.Wait(context.Background())
	if !errors.Is(err, lostAck) {
		t.Fatalf("commit with a lost ack: %v, want the injected error", err)
	}
	if stored.Load() < 2 {
		t.Fatalf("append stored %d times; the adaptor's retry should store it again", stored.Load())
	}
	b = countBatch(6)
	c = rec.Commit(context.Background(), b)
	b.Destroy()
	if err2 := c.Wait(context.Background()); !errors.Is(err2, lostAck) {
		t.Fatalf("commit after the recorder broke: %v, want the first error", err2)
	}
	env.builder.SetAppendHook(nil)
	if got := getString(t, db, "count"); got != "5" {
		t.Fatalf("count %q before restart, want 5 (unacknowledged commit not applied)", got)
	}
	if err := rec.Close(); !errors.Is(err, lostAck) {
		t.Fatalf("Close: %v, want the error that broke the recorder", err)
	}
	closeDB()

	db2, _ := openDB(t, dir)
	pos := replayInto(t, env.opener, shard, db2)
	if got := getString(t, db2, "count"); got != "6" {
		t.Fatalf("count %q after replay, want 6 (the stored commit exactly once)", got)
	}
	if got := getString(t, db2, "txn-005"); got != "value-5" {
		t.Fatalf("txn-005 = %q after replay", got)
	}
	if pos.Seq != 1+6 {
		t.Fatalf("position %v, want seq 7", pos)
	}
}

func TestTruncatedPosition(t *testing.T) {
	const shard = "trunc"
	env := newMemEnv(t)
	db, _ := openDB(t, t.TempDir())
	rec := becomeWriter(t, env.opener, shard, db, 1, "a")
	for i := 0; i < 3; i++ {
		commitAll(t, rec, []*grocksdb.WriteBatch{countBatch(i)})
	}
	behind, _ := openDB(t, t.TempDir())
	replayInto(t, env.opener, shard, behind) // at seq 4
	for i := 3; i < 6; i++ {
		commitAll(t, rec, []*grocksdb.WriteBatch{countBatch(i)})
	}
	pos := rec.Position()
	w := openWAL(t, env.opener, Channel(shard), 0)
	if err := w.Truncate(context.Background(), pos.LogID); err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]*grocksdb.DB{"behind": behind, "empty": func() *grocksdb.DB { d, _ := openDB(t, t.TempDir()); return d }()} {
		r := startPlayer(t, PlayerConfig{Log: openWAL(t, env.opener, Channel(shard), 0), DB: d, ShardID: shard})
		if err := r.wait(t); !errors.Is(err, wal.ErrTruncated) {
			t.Fatalf("%s DB: Play returned %v, want ErrTruncated", name, err)
		}
	}
	// The writer's own DB is at the head: replay from there still works,
	// also once every record is truncated (the log is empty, not behind).
	if got := replayInto(t, env.opener, shard, db); got != pos {
		t.Fatalf("replay at head: %v, want %v", got, pos)
	}
	if err := w.Truncate(context.Background(), pos.LogID+1); err != nil {
		t.Fatal(err)
	}
	if got := replayInto(t, env.opener, shard, db); got != pos {
		t.Fatalf("replay at head of a log truncated empty: %v, want %v", got, pos)
	}
}

// TestLogBehindDB: a log that lost records the DB applied (its channel
// removed and recreated, as when the NATS store is deleted) stops Play with
// ErrLogBehind naming both positions, instead of waiting for it forever.
func TestLogBehindDB(t *testing.T) {
	const shard = "lost"
	env := newMemEnv(t)
	db, _ := openDB(t, t.TempDir())
	rec := becomeWriter(t, env.opener, shard, db, 1, "a")
	for i := 0; i < 3; i++ {
		commitAll(t, rec, []*grocksdb.WriteBatch{countBatch(i)})
	}
	pos := rec.Position()
	_ = rec.Close()
	if err := env.opener.(wal.ChannelRemover).RemoveChannel(context.Background(), Channel(shard)); err != nil {
		t.Fatal(err)
	}
	r := startPlayer(t, PlayerConfig{Log: openWAL(t, env.opener, Channel(shard), 0), DB: db, ShardID: shard})
	err := r.wait(t)
	if !errors.Is(err, ErrLogBehind) || !strings.Contains(err.Error(), "ends at id 0") || !strings.Contains(err.Error(), pos.String()) {
		t.Fatalf("Play over a log that lost records: %v; want ErrLogBehind naming id 0 and %v", err, pos)
	}
}

func TestRecorderClosedAndHandoffErrors(t *testing.T) {
	env := newMemEnv(t)
	db, _ := openDB(t, t.TempDir())
	rec := becomeWriter(t, env.opener, "h", db, 5, "a")
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	b := countBatch(0)
	c := rec.Commit(context.Background(), b)
	b.Destroy()
	if err := c.Wait(context.Background()); !errors.Is(err, ErrRecorderClosed) {
		t.Fatalf("commit after Close: %v", err)
	}

	// A handoff with a term below the log's fence term is refused.
	db2, _ := openDB(t, t.TempDir())
	r := startPlayer(t, PlayerConfig{Log: openWAL(t, env.opener, Channel("h"), 0), DB: db2, ShardID: "h"})
	waitCaughtUp(t, r)
	if _, err := r.p.Handoff(context.Background(), openWAL(t, env.opener, Channel("h"), 4), 4, "b"); err == nil {
		t.Fatal("handoff with a lower term succeeded")
	}
	// A cancelled context stops a handoff; Play keeps running.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.p.Handoff(ctx, openWAL(t, env.opener, Channel("h"), 6), 6, "b"); !errors.Is(err, context.Canceled) {
		t.Fatalf("handoff with a cancelled context: %v", err)
	}
	if err := r.stop(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Play: %v", err)
	}
}

func TestCorruptRecordStopsPlay(t *testing.T) {
	env := newMemEnv(t)
	w := openWAL(t, env.opener, Channel("bad"), 0)
	if _, err := w.Append(context.Background(), message.MutableMessage{Payload: []byte("not a record")}); err != nil {
		t.Fatal(err)
	}
	db, _ := openDB(t, t.TempDir())
	r := startPlayer(t, PlayerConfig{Log: openWAL(t, env.opener, Channel("bad"), 0), DB: db, ShardID: "bad"})
	if err := r.wait(t); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("Play: %v, want ErrBadRecord", err)
	}
}

// TestConcurrentPipelinedCommits commits from several goroutines through the
// adaptor's pipeline (with random ack delays and acks reported out of
// order): every commit resolves in chain order and a reader replays the
// same DB.
func TestConcurrentPipelinedCommits(t *testing.T) {
	const shard = "pipe"
	env := newMemEnv(t)
	db, _ := openDB(t, t.TempDir())
	rec := becomeWriter(t, env.opener, shard, db, 1, "a")
	var delays atomic.Int64
	env.builder.SetAppendHook(func(ch string, m *message.MutableMessage, st memory.Stage) error {
		if st == memory.AfterStore && delays.Add(1)%7 == 0 {
			time.Sleep(time.Millisecond)
		}
		return nil
	})
	const workers, per = 4, 25
	type result struct {
		c *Commit
	}
	results := make(chan result, workers*per)
	for w := 0; w < workers; w++ {
		go func(w int) {
			for i := 0; i < per; i++ {
				b := countBatch(w*per + i)
				c := rec.Commit(context.Background(), b)
				b.Destroy()
				results <- result{c: c}
			}
		}(w)
	}
	var seqs []uint64
	for i := 0; i < workers*per; i++ {
		r := <-results
		if err := r.c.Wait(context.Background()); err != nil {
			t.Fatalf("commit: %v", err)
		}
		seqs = append(seqs, r.c.Position().Seq)
	}
	seen := map[uint64]bool{}
	for _, s := range seqs {
		if seen[s] || s < 2 || s > 1+workers*per {
			t.Fatalf("commit seq %d duplicated or out of range", s)
		}
		seen[s] = true
	}
	if p := rec.Position(); p.Seq != 1+workers*per {
		t.Fatalf("recorder at %v, want seq %d", p, 1+workers*per)
	}
	env.builder.SetAppendHook(nil)
	if got := getString(t, db, "count"); got != fmt.Sprint(workers*per) {
		t.Fatalf("count %q, want %d", got, workers*per)
	}
	db2, _ := openDB(t, t.TempDir())
	if got := replayInto(t, env.opener, shard, db2); got != rec.Position() {
		t.Fatalf("reader at %v, writer at %v", got, rec.Position())
	}
	equalDumps(t, dumpDB(t, db), dumpDB(t, db2))
}

// TestReplayLogsProgress: a replay that has not caught up logs how much it
// replayed and what is left, every ProgressInterval (here: every record).
func TestReplayLogsProgress(t *testing.T) {
	const shard = "progress"
	env := newMemEnv(t)
	db, _ := openDB(t, t.TempDir())
	rec := becomeWriter(t, env.opener, shard, db, 1, "a")
	for i := 0; i < 10; i++ {
		commitAll(t, rec, []*grocksdb.WriteBatch{countBatch(i)})
	}
	var logs bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	fresh, _ := openDB(t, t.TempDir())
	r := startPlayer(t, PlayerConfig{Log: openWAL(t, env.opener, Channel(shard), 0), DB: fresh, ShardID: shard,
		Logger: logger, ProgressInterval: time.Nanosecond})
	waitCaughtUp(t, r)
	if got, want := r.p.Target(), rec.Position().LogID; got != want {
		t.Fatalf("Target = %d, want the log's last id at start, %d", got, want)
	}
	var left dto.Metric
	if err := replayRemaining.WithLabelValues(shard).Write(&left); err != nil || left.GetGauge().GetValue() != 0 {
		t.Fatalf("consumerd_recoverylog_replay_remaining_ids = %v (%v) after catching up, want 0", left.GetGauge().GetValue(), err)
	}
	_ = r.stop(t)
	out := logs.String()
	if n := strings.Count(out, "recovery log replay progress: shard=progress records="); n < 5 || !strings.Contains(out, "remaining_ids=1 ") || !strings.Contains(out, "eta=") {
		t.Fatalf("%d progress lines; want one per record but the last, counting down to remaining_ids=1:\n%s", n, out)
	}
}
