package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/embednats"
	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/internal/natsconn"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/internal/rockstest"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/wal"
)

// TestShardsRecover: `shards recover` rebuilds a shard whose log was
// truncated behind a snapshot (JetStream object store) into a directory,
// equal to the live database key by key. The cluster's prefix is not the
// default: recover finds the log and the snapshots in the namespace derived
// from --etcd.prefix.
func TestShardsRecover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	endpoints := etcdtest.StartServer(t)
	cli := etcdtest.NewClient(t, endpoints)
	url := natstest.Start(t)
	const prefix, shardID = "/team-a/wc", "wc-7"
	ns, err := connect.WALNamespace("", prefix)
	if err != nil || ns != "team--a-swc" {
		t.Fatalf("namespace of %s: %q, %v", prefix, ns, err)
	}

	opener, err := connect.OpenWAL(url, ns, 1, 0, natsconn.Security{}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer opener.Close()
	live := filepath.Join(t.TempDir(), "live")
	opts := grocksdb.NewDefaultOptions()
	opts.SetCreateIfMissing(true)
	defer opts.Destroy()
	db, err := grocksdb.OpenDb(opts, live)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	// A writer: replay (nothing) and hand off, as a primary does.
	ch := recoverylog.Channel(shardID)
	rlog, err := opener.Open(ctx, &wal.OpenOption{Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	pl := recoverylog.NewPlayer(recoverylog.PlayerConfig{Log: rlog, DB: db, ShardID: shardID})
	errc := make(chan error, 1)
	go func() { errc <- pl.Play(ctx) }()
	guardKey := prefix + "/assign/" + shardID + "/z/m/0"
	put, err := cli.Put(ctx, guardKey, `{"state":"PRIMARY"}`)
	if err != nil {
		t.Fatal(err)
	}
	term := uint64(put.Header.Revision)
	w, err := opener.Open(ctx, &wal.OpenOption{Channel: ch, Term: term})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rec, err := pl.Handoff(ctx, w, term, "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	rlog.Close()
	defer rec.Close()
	commit := func(from, n int) {
		wb := grocksdb.NewWriteBatch()
		defer wb.Destroy()
		var c *recoverylog.Commit
		for i := from; i < from+n; i++ {
			wb.Put([]byte(fmt.Sprintf("k%03d", i%50)), []byte(fmt.Sprintf("v%d", i)))
			c = rec.Commit(ctx, wb)
			wb.Clear()
		}
		if err := c.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}

	st, closeStore, err := connect.OpenSnapshotStore(ctx, "", url, ns, 1, 0, natsconn.Security{}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	sn, err := snapshot.NewSnapshotter(snapshot.Config{Shard: shardID, Store: st, Etcd: cli, Prefix: prefix, ScratchDir: filepath.Join(t.TempDir(), "scratch")})
	if err != nil {
		t.Fatal(err)
	}
	src := snapshot.Source{DB: db, Recorder: rec, Log: w, Term: term, Guard: snapshot.Guard{Key: guardKey, CreateRevision: put.Header.Revision}}
	var last *snapshot.Result
	for i := 0; i < 3; i++ {
		commit(i*100, 100)
		if last, err = sn.Take(ctx, src); err != nil {
			t.Fatal(err)
		}
	}
	if last.Retain.TruncatedBefore == 0 {
		t.Fatal("the log was not truncated")
	}
	commit(1000, 30) // a tail after the snapshot

	out := filepath.Join(t.TempDir(), "recovered")
	var stdout, stderr bytes.Buffer
	code := Run(ctx, []string{"shards", "recover", "--shard", shardID, "--dir", out,
		"--etcd.endpoints", strings.Join(endpoints, ","), "--wal.url", url, "--etcd.prefix", prefix},
		Options{Apps: []shard.App{wordcount.App()}, Stdout: &stdout, Stderr: &stderr})
	if code != 0 {
		t.Fatalf("recover exited %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), last.Manifest.ID) {
		t.Fatalf("output %q does not name snapshot %s", stdout.String(), last.Manifest.ID)
	}
	got := rockstest.MapDir(t, out)
	want := rockstest.Map(t, db)
	if len(got) != len(want) || len(want) < 50 {
		t.Fatalf("recovered %d keys, live %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("key %q: recovered %q, live %q", k, got[k], v)
		}
	}

	// The directory must be empty now: recover refuses to overwrite.
	stderr.Reset()
	code = Run(ctx, []string{"shards", "recover", "--shard", shardID, "--dir", out,
		"--etcd.endpoints", strings.Join(endpoints, ","), "--wal.url", url, "--etcd.prefix", prefix},
		Options{Apps: []shard.App{wordcount.App()}, Stdout: &stdout, Stderr: &stderr})
	if code == 0 || !strings.Contains(stderr.String(), "not empty") {
		t.Fatalf("recover into a non-empty dir: code %d, stderr %q", code, stderr.String())
	}

	// A shard id with no snapshot and no log (a typo) is an error, not an
	// empty database; the directory is left empty for another try.
	stderr.Reset()
	typo := filepath.Join(t.TempDir(), "typo")
	code = Run(ctx, []string{"shards", "recover", "--shard", shardID + "x", "--dir", typo,
		"--etcd.endpoints", strings.Join(endpoints, ","), "--wal.url", url, "--etcd.prefix", prefix},
		Options{Apps: []shard.App{wordcount.App()}, Stdout: &stdout, Stderr: &stderr})
	if code == 0 || !strings.Contains(stderr.String(), "nothing to recover") {
		t.Fatalf("recover of an unknown shard: code %d, stderr %q", code, stderr.String())
	}
	if ents, _ := os.ReadDir(typo); len(ents) != 0 {
		t.Fatalf("recover of an unknown shard left %d entries in %s", len(ents), typo)
	}
}

func TestShardsRecoverUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"shards", "recover", "--dir", "x"}, "--shard"},
		{[]string{"shards", "recover", "--shard", "a/b", "--dir", "x"}, "--shard"},
		{[]string{"shards", "recover", "--shard", "s"}, "--dir"},
	} {
		var out, errb bytes.Buffer
		code := Run(t.Context(), tc.args, Options{Apps: []shard.App{wordcount.App()}, Stdout: &out, Stderr: &errb})
		if code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: code %d stderr %q, want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// TestSnapshotStoreWaitsForNATS: serve opens the snapshot store with
// retries, so a member that starts while NATS is not answering yet (the
// chaos harness restarted one as a nats-server of the cluster was killed:
// it exited 1) waits for it; a client command tries once and says why.
func TestSnapshotStoreWaitsForNATS(t *testing.T) {
	port := freeport.Port(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	if _, _, err := connect.OpenSnapshotStore(t.Context(), "", url, "consumerd", 1, 0, natsconn.Security{}, hclog.NewNullLogger()); err == nil || !strings.Contains(err.Error(), "snapshot store") {
		t.Fatalf("one try without NATS: %v, want an error naming the snapshot store", err)
	}
	logs := newWatchBuffer()
	started := make(chan *embednats.Server, 1)
	go func() { // owned by the test: started once, shut down at its end
		// NATS comes up once serve has tried and said it waits.
		if _, ok := logs.await(30*time.Second, func(s string) bool { return strings.Contains(s, "snapshot store not reachable yet") }); !ok {
			t.Error("OpenSnapshotStore never said it waits for NATS")
		}
		s, err := embednats.Start(embednats.Config{Port: port, StoreDir: t.TempDir()})
		if err != nil {
			t.Error(err)
		}
		started <- s
	}()
	log := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Warn})
	st, closeStore, err := connect.OpenSnapshotStore(t.Context(), "", url, "consumerd", 1, time.Minute, natsconn.Security{}, log)
	s := <-started
	if s != nil {
		defer s.Shutdown()
	}
	if err != nil {
		t.Fatalf("serve's open while NATS starts: %v", err)
	}
	defer closeStore()
	if st == nil {
		t.Fatal("no store")
	}
}
