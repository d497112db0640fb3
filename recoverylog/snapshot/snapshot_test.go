package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	"github.com/consumerd/consumerd/wal"
	walimplsjs "github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// TestRestoreAfterTruncationEqualsLive: snapshots and truncation, then a
// fresh recovery (snapshot + replay of the log after it) equals the live
// database entry by entry, with both stores.
func TestRestoreAfterTruncationEqualsLive(t *testing.T) {
	for _, kind := range append(storeKinds, "jetstream-wal") {
		t.Run(kind, func(t *testing.T) {
			var e *env
			if kind == "jetstream-wal" {
				// Both the recovery log and the store on JetStream.
				url := natstest.Start(t)
				e = newEnvStore(t, newJetStreamStore(t, url), walimplsjs.NewBuilder(walimplsjs.Config{URL: url}))
			} else {
				e = newEnv(t, kind, nil)
			}
			s := e.snapshotter(nil)
			var results []*snapshot.Result
			for round := 0; round < 4; round++ {
				e.commit(50, 300, 100)
				res, err := s.Take(e.ctx, e.source())
				if err != nil {
					t.Fatalf("snapshot %d: %v", round, err)
				}
				results = append(results, res)
			}
			e.commit(20, 300, 100) // a tail after the last snapshot
			last := results[len(results)-1]
			if got, want := len(last.Retain.Kept), snapshot.DefaultKept; got != want {
				t.Fatalf("kept %d snapshots, want %d", got, want)
			}
			oldest := results[len(results)-snapshot.DefaultKept].Manifest
			if got, want := last.Retain.TruncatedBefore, recoverylogID(oldest.LogID+1); got != want {
				t.Fatalf("truncated before %d, want %d (oldest kept covers %d)", got, want, oldest.LogID)
			}
			// The log really is truncated: a replay from an empty DB fails.
			db := openDB(t, filepath.Join(t.TempDir(), "empty"))
			defer db.Close()
			if _, err := snapshot.ReplayToHead(e.ctx, e.opener, db, e.shard, testLogger(t)); !errors.Is(err, wal.ErrTruncated) {
				t.Fatalf("replay of the truncated log from scratch: %v, want ErrTruncated", err)
			}
			res := e.checkRecovers()
			if res.Manifest == nil || res.Manifest.ID != last.Manifest.ID {
				t.Fatalf("recovered from %v, want the newest snapshot %s", res.Manifest, last.Manifest.ID)
			}
			// Pointer names the newest manifest.
			ptr, ok, err := snapshot.LoadPointer(e.ctx, e.etcd, testPrefix, e.shard)
			if err != nil || !ok || ptr.ID != last.Manifest.ID || ptr.Term != e.term {
				t.Fatalf("pointer = %+v, %v, %v; want id %s term %d", ptr, ok, err, last.Manifest.ID, e.term)
			}
			// Only kept manifests remain, and every object is named by one.
			checkNoGarbage(t, e, last.Retain.Kept)
		})
	}
}

func recoverylogID(v uint64) (id messageID) { return messageID(v) }

// checkNoGarbage asserts the store holds exactly the kept manifests and
// the objects they name.
func checkNoGarbage(t *testing.T, e *env, kept []string) {
	t.Helper()
	named := map[string]bool{}
	for _, id := range kept {
		named[snapshot.ManifestName(e.shard, id)] = true
		m, err := snapshot.LoadManifest(e.ctx, e.store, snapshot.ManifestName(e.shard, id))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m.Files {
			named[f.Object] = true
		}
	}
	objs := storeObjects(t, e.store, e.shard)
	for name := range objs {
		if !named[name] {
			t.Errorf("garbage left in the store: %s", name)
		}
	}
	for name := range named {
		if _, ok := objs[name]; !ok {
			t.Errorf("kept snapshot's object missing: %s", name)
		}
	}
}

// TestCrashAtEveryStep: a snapshot that dies at any step leaves a usable
// snapshot behind the pointer (the old or the new one), never a dangling
// pointer; recovery equals the live state; a restarted primary snapshots
// again and garbage is collected.
func TestCrashAtEveryStep(t *testing.T) {
	steps := []struct {
		step  snapshot.Step
		nth   int  // crash at the nth occurrence of step
		moved bool // the pointer names the new snapshot after the crash
	}{
		{snapshot.StepCheckpoint, 1, false},
		{snapshot.StepUpload, 1, false},
		{snapshot.StepUpload, 3, false},
		{snapshot.StepManifest, 1, false},
		{snapshot.StepRecord, 1, false},
		{snapshot.StepPointer, 1, true},
		{snapshot.StepTruncate, 1, true},
	}
	for _, kind := range storeKinds {
		for _, c := range steps {
			t.Run(fmt.Sprintf("%s/%s#%d", kind, c.step, c.nth), func(t *testing.T) {
				e := newEnv(t, kind, nil)
				e.commit(40, 200, 64)
				first, err := e.snapshotter(nil).Take(e.ctx, e.source())
				if err != nil {
					t.Fatal(err)
				}
				e.commit(40, 200, 64)
				crash := errors.New("crash")
				seen := 0
				hook := func(s snapshot.Step) error {
					if s == c.step {
						seen++
						if seen == c.nth {
							return crash
						}
					}
					return nil
				}
				res, err := e.snapshotter(hook).Take(e.ctx, e.source())
				if !errors.Is(err, crash) {
					t.Fatalf("take with a crash at %s: %v, %+v", c.step, err, res)
				}
				e.commit(10, 200, 64)

				ptr, ok, err := snapshot.LoadPointer(e.ctx, e.etcd, testPrefix, e.shard)
				if err != nil || !ok {
					t.Fatalf("pointer: %v %v", ok, err)
				}
				if moved := ptr.ID != first.Manifest.ID; moved != c.moved {
					t.Fatalf("pointer moved = %v, want %v (pointer %s)", moved, c.moved, ptr.ID)
				}
				// The pointer's snapshot is whole: restore exactly it.
				m, err := snapshot.Restore(e.ctx, snapshot.RestoreConfig{
					Store: e.store, Shard: e.shard, Pointer: &ptr, Dir: filepath.Join(t.TempDir(), "r"),
				})
				if err != nil || m.ID != ptr.ID {
					t.Fatalf("restore of the pointer's snapshot: %v, %v", m, err)
				}
				e.checkRecovers()

				// A restarted primary snapshots again (twice, so the
				// aborted snapshot falls behind the oldest kept) and the
				// store ends up holding only kept snapshots.
				s := e.snapshotter(nil)
				var last *snapshot.Result
				for i := 0; i < 2; i++ {
					e.commit(10, 200, 64)
					if last, err = s.Take(e.ctx, e.source()); err != nil {
						t.Fatal(err)
					}
				}
				e.commit(5, 200, 64)
				e.checkRecovers()
				checkNoGarbage(t, e, last.Retain.Kept)
			})
		}
	}
}

// TestCorruptSnapshotFallsBack: a corrupt or missing SST of the newest
// snapshot is detected and the older one is used; with no usable snapshot
// left on a truncated log, recovery fails with ErrTruncated rather than
// building wrong state.
func TestCorruptSnapshotFallsBack(t *testing.T) {
	for _, kind := range storeKinds {
		for _, damage := range []string{"corrupt", "missing"} {
			t.Run(kind+"/"+damage, func(t *testing.T) {
				e := newEnv(t, kind, nil)
				s := e.snapshotter(nil)
				var rs []*snapshot.Result
				for i := 0; i < 3; i++ {
					e.commit(30, 200, 64)
					r, err := s.Take(e.ctx, e.source())
					if err != nil {
						t.Fatal(err)
					}
					rs = append(rs, r)
				}
				e.commit(10, 200, 64)
				newest, older := rs[2].Manifest, rs[1].Manifest
				damageFiles(t, e, onlyIn(newest, older), damage)
				res := e.checkRecovers()
				if res.Manifest == nil || res.Manifest.ID != older.ID {
					t.Fatalf("recovered from %v, want the older snapshot %s", res.Manifest, older.ID)
				}
				// Damage the older one too: nothing usable, the log is truncated.
				damageFiles(t, e, onlyIn(older, nil), damage)
				_, _, err := e.recover()
				if !errors.Is(err, wal.ErrTruncated) {
					t.Fatalf("recover with no usable snapshot: %v, want ErrTruncated", err)
				}
			})
		}
	}
}

// onlyIn lists the SST files of a that b does not name (all SSTs of a if b is nil).
func onlyIn(a, b *snapshot.Manifest) []snapshot.File {
	inB := map[string]bool{}
	if b != nil {
		for _, f := range b.Files {
			inB[f.Object] = true
		}
	}
	var out []snapshot.File
	for _, f := range a.Files {
		if strings.HasSuffix(f.Name, ".sst") && !inB[f.Object] {
			out = append(out, f)
		}
	}
	return out
}

func damageFiles(t *testing.T, e *env, files []snapshot.File, how string) {
	t.Helper()
	if len(files) == 0 {
		t.Fatal("no SST to damage")
	}
	f := files[0]
	switch how {
	case "missing":
		if err := e.store.Delete(e.ctx, f.Object); err != nil {
			t.Fatal(err)
		}
	case "corrupt":
		rc, err := e.store.Get(e.ctx, f.Object)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, f.Size)
		_, err = ioReadFull(rc, b)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0x40 // one flipped bit, same size
		if err := e.store.Put(e.ctx, f.Object, bytesReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPointerGuard: a deposed primary cannot move the pointer, and a
// pointer never moves backwards.
func TestPointerGuard(t *testing.T) {
	e := newEnv(t, "dir", nil)
	e.commit(10, 50, 16)
	res, err := e.snapshotter(nil).Take(e.ctx, e.source())
	if err != nil {
		t.Fatal(err)
	}
	p := snapshot.PointerOf(res.Manifest)
	older := p
	older.LogID--
	if err := snapshot.PublishPointer(e.ctx, e.etcd, testPrefix, e.shard, older, e.guard); !errors.Is(err, snapshot.ErrStalePointer) {
		t.Fatalf("backwards pointer: %v, want ErrStalePointer", err)
	}
	// The assignment is replaced (a promotion elsewhere): the old guard fails.
	if _, err := e.etcd.Delete(e.ctx, e.guard.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := e.etcd.Put(e.ctx, e.guard.Key, `{}`); err != nil {
		t.Fatal(err)
	}
	newer := p
	newer.LogID += 100
	if err := snapshot.PublishPointer(e.ctx, e.etcd, testPrefix, e.shard, newer, e.guard); !errors.Is(err, snapshot.ErrNotPrimary) {
		t.Fatalf("zombie pointer update: %v, want ErrNotPrimary", err)
	}
	// A zombie's whole snapshot fails at the pointer and leaves it alone.
	e.commit(10, 50, 16)
	if _, err := e.snapshotter(nil).Take(e.ctx, e.source()); !errors.Is(err, snapshot.ErrNotPrimary) {
		t.Fatalf("zombie take: %v, want ErrNotPrimary", err)
	}
	got, _, err := snapshot.LoadPointer(e.ctx, e.etcd, testPrefix, e.shard)
	if err != nil || got.ID != p.ID {
		t.Fatalf("pointer after zombie attempts = %+v, %v; want %s", got, err, p.ID)
	}
}

// TestIncrementalReuse: a second snapshot after a small change uploads
// only the new SSTs.
func TestIncrementalReuse(t *testing.T) {
	e := newEnv(t, "dir", nil)
	e.commit(400, 2000, 200)
	s := e.snapshotter(nil)
	first, err := s.Take(e.ctx, e.source())
	if err != nil {
		t.Fatal(err)
	}
	if first.ReusedBytes != 0 || first.UploadedFiles == 0 {
		t.Fatalf("first snapshot reused %d bytes, uploaded %d files", first.ReusedBytes, first.UploadedFiles)
	}
	e.commit(2, 2000, 200)
	second, err := s.Take(e.ctx, e.source())
	if err != nil {
		t.Fatal(err)
	}
	ratio := float64(second.ReusedBytes) / float64(second.SSTBytes)
	if ratio < 0.8 {
		t.Fatalf("second snapshot reused %d of %d SST bytes (%.2f), want >= 0.8", second.ReusedBytes, second.SSTBytes, ratio)
	}
	// Non-SST files are uploaded every time.
	for _, f := range second.Manifest.Files {
		if !strings.HasSuffix(f.Name, ".sst") && !strings.HasPrefix(f.Object, snapshot.FilesPrefix(e.shard, second.Manifest.ID)) {
			t.Errorf("non-SST file %s stored as %s, not under the snapshot's id", f.Name, f.Object)
		}
	}
}

// TestCheckpointCapturesUnflushedWrites: the shard DB writes without
// RocksDB's WAL; the snapshot must still hold the memtable's contents and
// the position stored with them.
func TestCheckpointCapturesUnflushedWrites(t *testing.T) {
	e := newEnv(t, "dir", nil)
	e.commit(5, 10, 8)
	res, err := e.snapshotter(nil).Take(e.ctx, e.source())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "r")
	m, err := snapshot.Restore(e.ctx, snapshot.RestoreConfig{Store: e.store, Shard: e.shard, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != res.Manifest.ID {
		t.Fatalf("restored %s, want %s", m.ID, res.Manifest.ID)
	}
	db := openDB(t, dir)
	defer db.Close()
	pos, err := recoverylog.LoadPosition(db)
	if err != nil {
		t.Fatal(err)
	}
	if pos != res.Manifest.Position.Recoverylog() || pos.Seq == 0 {
		t.Fatalf("restored position %v, manifest %v", pos, res.Manifest.Position)
	}
	n := 0
	for _, kv := range dump(t, db) {
		if strings.HasPrefix(kv[0], "key-") {
			n++
		}
	}
	if n != 10 {
		t.Fatalf("restored %d user keys, want 10", n)
	}
}

// TestTakeEmpty: nothing applied, nothing to snapshot.
func TestTakeEmpty(t *testing.T) {
	dir := t.TempDir()
	opts := grocksdb.NewDefaultOptions()
	opts.SetCreateIfMissing(true)
	defer opts.Destroy()
	db, err := grocksdb.OpenDb(opts, filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := snapshot.NewDirStore(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := snapshot.NewSnapshotter(snapshot.Config{Shard: "x", Store: st, Etcd: etcdClientStub(t), ScratchDir: filepath.Join(dir, "scratch")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(context.Background(), snapshot.Source{DB: db}); !errors.Is(err, snapshot.ErrEmpty) {
		t.Fatalf("take of an empty DB: %v, want ErrEmpty", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "scratch")); len(ents) != 0 {
		t.Fatalf("scratch directory not cleaned: %v", ents)
	}
}
