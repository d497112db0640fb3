package recoverylog

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"
	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/internal/rockstest"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Warn, Output: testWriter{t}})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// openDB opens (creating) a RocksDB in dir; it is closed at cleanup unless
// the caller closes it first via the returned func.
func openDB(t testing.TB, dir string) (*grocksdb.DB, func()) {
	t.Helper()
	opts := grocksdb.NewDefaultOptions()
	opts.SetCreateIfMissing(true)
	opts.SetMergeOperator(countMerge{})
	db, err := grocksdb.OpenDb(opts, dir)
	// opts is never destroyed: in grocksdb v1.7.15, Options.Destroy with a
	// Go merge operator frees it twice and crashes (a small leak in tests).
	if err != nil {
		t.Fatalf("open rocksdb %s: %v", dir, err)
	}
	closed := false
	closeFn := func() {
		if !closed {
			closed = true
			db.Close()
		}
	}
	t.Cleanup(closeFn)
	return db, closeFn
}

// countMerge sums decimal counters: Merge(key, "1") counts applications, so
// a record applied twice shows.
type countMerge struct{}

func (countMerge) Name() string { return "consumerd.test.count" }

func (countMerge) FullMerge(key, existing []byte, operands [][]byte) ([]byte, bool) {
	n := 0
	if existing != nil {
		v, err := strconv.Atoi(string(existing))
		if err != nil {
			return nil, false
		}
		n = v
	}
	for _, op := range operands {
		v, err := strconv.Atoi(string(op))
		if err != nil {
			return nil, false
		}
		n += v
	}
	return []byte(strconv.Itoa(n)), true
}

// dumpDB is the DB's full contents, in key order.
func dumpDB(t testing.TB, db *grocksdb.DB) [][2]string { t.Helper(); return rockstest.Pairs(t, db) }

// userState is the DB's contents without the recovery-log position.
func userState(t testing.TB, db *grocksdb.DB) map[string]string {
	m := map[string]string{}
	for _, kv := range dumpDB(t, db) {
		if kv[0] != string(PositionKey) {
			m[kv[0]] = kv[1]
		}
	}
	return m
}

func equalDumps(t testing.TB, a, b [][2]string) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("DBs differ: %d vs %d keys", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("DBs differ at entry %d: %q=%q vs %q=%q", i, a[i][0], trunc(a[i][1]), b[i][0], trunc(b[i][1]))
		}
	}
}

func trunc(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%s…(%d bytes)", s[:40], len(s))
	}
	return s
}

// memEnv is a memory WAL backend behind the real adaptor. The backend
// reports outcomes out of call order, as replies, timeouts and disconnects
// of a real connection may: the adaptor restores the order.
type memEnv struct {
	builder *memory.Builder
	opener  wal.Opener
}

func newMemEnv(t testing.TB) *memEnv {
	t.Helper()
	b := memory.NewBuilder()
	b.ShuffleAcks(uint64(time.Now().UnixNano()) | 1)
	op, err := wal.NewOpenerBuilder(b, wal.WithRetry(time.Millisecond, 10*time.Millisecond, 3)).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	return &memEnv{builder: b, opener: op}
}

func openWAL(t testing.TB, op wal.Opener, channel string, term uint64) wal.WAL {
	t.Helper()
	w, err := op.Open(context.Background(), &wal.OpenOption{Channel: channel, Term: term})
	if err != nil {
		t.Fatalf("open %s term %d: %v", channel, term, err)
	}
	t.Cleanup(w.Close)
	return w
}

// running is a Player whose Play runs in a goroutine owned by the test.
type running struct {
	p      *Player
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func startPlayer(t testing.TB, cfg PlayerConfig) *running {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{p: NewPlayer(cfg), cancel: cancel, done: make(chan struct{})}
	go func() {
		r.err = r.p.Play(ctx)
		close(r.done)
	}()
	t.Cleanup(func() {
		r.cancel()
		<-r.done
	})
	return r
}

// wait waits for Play to return and gives its result.
func (r *running) wait(t testing.TB) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(30 * time.Second):
		t.Fatalf("Play did not return within 30s (position %v)", r.p.Position())
		return nil
	}
}

// stop cancels Play and returns its result.
func (r *running) stop(t testing.TB) error {
	r.cancel()
	return r.wait(t)
}

func waitCaughtUp(t testing.TB, r *running) {
	t.Helper()
	select {
	case <-r.p.CaughtUp():
	case <-r.done:
		t.Fatalf("Play returned before catching up: %v", r.err)
	case <-time.After(60 * time.Second):
		t.Fatalf("player did not catch up within 60s (position %v)", r.p.Position())
	}
}

// waitPosition polls until the player reached at least seq.
func waitPosition(t testing.TB, r *running, seq uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for r.p.Position().Seq < seq {
		if time.Now().After(deadline) {
			t.Fatalf("player stuck at %v, want seq %d", r.p.Position(), seq)
		}
		select {
		case <-r.done:
			t.Fatalf("Play returned at %v: %v", r.p.Position(), r.err)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// randomBatch builds a batch of puts (and some deletes of earlier keys)
// plus a source offset, with about size bytes of values.
func randomBatch(rng *rand.Rand, txn int, size int) *grocksdb.WriteBatch {
	wb := grocksdb.NewWriteBatch()
	for n := 0; n < size; {
		k := fmt.Sprintf("key-%05d", rng.IntN(5000))
		if rng.IntN(10) == 0 {
			wb.Delete([]byte(k))
			continue
		}
		v := make([]byte, 16+rng.IntN(200))
		for i := range v {
			v[i] = byte('a' + rng.IntN(26))
		}
		wb.Put([]byte(k), v)
		n += len(k) + len(v)
	}
	PutOffset(wb, "words/0000", SourceOffset{ID: message.MessageID(1000 + txn)})
	return wb
}

// commitAll commits batches through rec (pipelined) and waits for them all.
func commitAll(t testing.TB, rec *Recorder, batches []*grocksdb.WriteBatch) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	commits := make([]*Commit, 0, len(batches))
	for _, b := range batches {
		commits = append(commits, rec.Commit(ctx, b))
		b.Destroy()
	}
	for i, c := range commits {
		if err := c.Wait(ctx); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
