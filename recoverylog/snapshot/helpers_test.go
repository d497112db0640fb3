package snapshot_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/internal/rockstest"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	walnames "github.com/consumerd/consumerd/wal/walimpls/jetstream"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go v1.55.0: this goroutine may start after the connection
		// closed and then waits on a nil channel forever (third party).
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
}

const testPrefix = "/consumerd-test"

// testNamespace is testPrefix's WAL namespace, as the daemon derives it.
var testNamespace = func() string {
	ns, err := walnames.NamespaceOf(testPrefix)
	if err != nil {
		panic(err)
	}
	return ns
}()

func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Warn, Output: testWriter{t}})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }()
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// storeKinds are the stores every scenario runs against.
var storeKinds = []string{"dir", "jetstream"}

// newStore returns a fresh store of the given kind.
func newStore(t testing.TB, kind string) snapshot.Store {
	t.Helper()
	switch kind {
	case "dir":
		st, err := snapshot.NewDirStore(filepath.Join(t.TempDir(), "store"))
		if err != nil {
			t.Fatal(err)
		}
		return st
	case "jetstream":
		return newJetStreamStore(t, natstest.Start(t))
	}
	t.Fatalf("unknown store kind %q", kind)
	return nil
}

func newJetStreamStore(t testing.TB, url string) *snapshot.JetStreamStore {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := snapshot.NewJetStreamStore(ctx, js, snapshot.JetStreamConfig{Bucket: snapshot.BucketName(testNamespace)})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// env is one shard's world: a WAL backend, etcd, a store, and a writer
// (a DB with a Recorder) standing in for the primary.
type env struct {
	t      testing.TB
	ctx    context.Context
	shard  string
	opener wal.Opener
	etcd   *clientv3.Client
	store  snapshot.Store
	guard  snapshot.Guard

	dir  string
	db   *grocksdb.DB
	wlog wal.WAL
	rec  *recoverylog.Recorder
	term uint64
	n    int // commits so far
}

func newEnv(t testing.TB, storeKind string, backend walimpls.OpenerBuilderImpls) *env {
	t.Helper()
	return newEnvStore(t, newStore(t, storeKind), backend)
}

// newEnvStore is newEnv on a given store.
func newEnvStore(t testing.TB, store snapshot.Store, backend walimpls.OpenerBuilderImpls) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if backend == nil {
		backend = memory.NewBuilder()
	}
	opener, err := wal.NewOpenerBuilder(backend).Build()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, shard: "shard-1", opener: opener, etcd: etcdtest.Start(t), store: store}
	// The guard: a stand-in for the primary's slot-0 assignment key.
	key := testPrefix + "/assign/shard-1/z/m/0"
	resp, err := e.etcd.Put(ctx, key, `{"state":"PRIMARY"}`)
	if err != nil {
		t.Fatal(err)
	}
	e.guard = snapshot.Guard{Key: key, CreateRevision: resp.Header.Revision}
	e.term = uint64(resp.Header.Revision)
	e.dir = filepath.Join(t.TempDir(), "db")
	e.db = openDB(t, e.dir)
	e.startWriter()
	t.Cleanup(func() {
		e.stopWriter()
		e.db.Close()
		opener.Close()
	})
	return e
}

func openDB(t testing.TB, dir string) *grocksdb.DB {
	t.Helper()
	opts := shard.DefaultDBOptions() // a shard database's
	opts.SetCreateIfMissing(true)
	defer opts.Destroy()
	db, err := grocksdb.OpenDb(opts, dir)
	if err != nil {
		t.Fatalf("open rocksdb %s: %v", dir, err)
	}
	return db
}

// startWriter replays the log into the DB and hands off to a new Recorder.
func (e *env) startWriter() {
	t := e.t
	ch := recoverylog.Channel(e.shard)
	rlog, err := e.opener.Open(e.ctx, &wal.OpenOption{Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	defer rlog.Close()
	pl := recoverylog.NewPlayer(recoverylog.PlayerConfig{Log: rlog, DB: e.db, Logger: testLogger(t), ShardID: e.shard})
	errc := make(chan error, 1)
	go func() { errc <- pl.Play(e.ctx) }()
	w, err := e.opener.Open(e.ctx, &wal.OpenOption{Channel: ch, Term: e.term})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := pl.Handoff(e.ctx, w, e.term, "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	e.wlog, e.rec = w, rec
}

func (e *env) stopWriter() {
	if e.rec != nil {
		if err := e.rec.Close(); err != nil {
			e.t.Errorf("recorder: %v", err)
		}
		e.wlog.Close()
		e.rec = nil
	}
}

// commit writes n transactions, each overwriting keys of a fixed key space
// of size keys with values of size valueSize.
func (e *env) commit(n, keys, valueSize int) {
	e.t.Helper()
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	var last *recoverylog.Commit
	for i := 0; i < n; i++ {
		e.n++
		for j := 0; j < 4; j++ {
			k := (e.n*4 + j) % keys
			v := bytes.Repeat([]byte{byte('a' + e.n%26)}, valueSize)
			v = append(v, fmt.Sprintf("/%d", e.n)...)
			wb.Put([]byte(fmt.Sprintf("key-%06d", k)), v)
		}
		recoverylog.PutOffset(wb, "words/0000", recoverylog.SourceOffset{ID: message.MessageID(e.n)})
		last = e.rec.Commit(e.ctx, wb)
		wb.Clear()
	}
	if last != nil {
		if err := last.Wait(e.ctx); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) snapshotter(hook func(snapshot.Step) error) *snapshot.Snapshotter {
	e.t.Helper()
	s, err := snapshot.NewSnapshotter(snapshot.Config{
		Shard: e.shard, Store: e.store, Etcd: e.etcd, Prefix: testPrefix,
		ScratchDir: filepath.Join(filepath.Dir(e.dir), "scratch"), Logger: testLogger(e.t), Hook: hook,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) source() snapshot.Source {
	return snapshot.Source{DB: e.db, Recorder: e.rec, Log: e.wlog, Term: e.term, Guard: e.guard}
}

// recover rebuilds the shard into a fresh directory and returns its dump.
func (e *env) recover() ([][2]string, snapshot.RecoverResult, error) {
	e.t.Helper()
	dir := filepath.Join(e.t.TempDir(), "recovered")
	res, err := snapshot.Recover(e.ctx, snapshot.RecoverConfig{
		Shard: e.shard, Dir: dir, Store: e.store, Etcd: e.etcd, Prefix: testPrefix,
		Opener: e.opener, Logger: testLogger(e.t),
	})
	if err != nil {
		return nil, res, err
	}
	db := openDB(e.t, dir)
	defer db.Close()
	return dump(e.t, db), res, nil
}

// checkRecovers asserts a fresh recovery equals the live DB, key by key.
func (e *env) checkRecovers() snapshot.RecoverResult {
	e.t.Helper()
	got, res, err := e.recover()
	if err != nil {
		e.t.Fatalf("recover: %v", err)
	}
	want := dump(e.t, e.db)
	if d := diffDumps(got, want); d != "" {
		e.t.Fatalf("recovered state differs from the live state: %s", d)
	}
	return res
}

func dump(t testing.TB, db *grocksdb.DB) [][2]string { t.Helper(); return rockstest.Pairs(t, db) }

func diffDumps(got, want [][2]string) string {
	for i := 0; i < len(got) && i < len(want); i++ {
		if got[i] != want[i] {
			return fmt.Sprintf("entry %d: got %q=%.20q, want %q=%.20q", i, got[i][0], got[i][1], want[i][0], want[i][1])
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("got %d entries, want %d", len(got), len(want))
	}
	return ""
}

// storeObjects lists every object of the shard.
func storeObjects(t testing.TB, st snapshot.Store, shard string) map[string]int64 {
	t.Helper()
	objs, err := st.List(context.Background(), shard+"/")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, o := range objs {
		out[o.Name] = o.Size
	}
	return out
}
