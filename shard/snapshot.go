package shard

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/linxGnu/grocksdb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	"github.com/consumerd/consumerd/shard/rocksmem"
	"github.com/consumerd/consumerd/wal"
)

// Snapshot defaults of a Spec whose snapshot fields are zero.
const (
	// DefaultSnapshotIntervalBytes is the default snapshot_interval_bytes:
	// a primary snapshots after every 64 MiB of recovery log it wrote.
	DefaultSnapshotIntervalBytes = 64 << 20
	// DefaultSnapshotsKept is the default snapshots_kept.
	DefaultSnapshotsKept = snapshot.DefaultKept
	// DefaultSnapshotCheckInterval is how often a primary checks whether a
	// snapshot is due.
	DefaultSnapshotCheckInterval = time.Second
)

// EffectiveSnapshotIntervalBytes is SnapshotIntervalBytes, or
// DefaultSnapshotIntervalBytes when zero.
func (s *Spec) EffectiveSnapshotIntervalBytes() int64 {
	if s.SnapshotIntervalBytes <= 0 {
		return DefaultSnapshotIntervalBytes
	}
	return s.SnapshotIntervalBytes
}

// EffectiveSnapshotsKept is SnapshotsKept, or DefaultSnapshotsKept when zero.
func (s *Spec) EffectiveSnapshotsKept() int {
	if s.SnapshotsKept <= 0 {
		return DefaultSnapshotsKept
	}
	return s.SnapshotsKept
}

// SnapshotOptions enable snapshots and log truncation (Config.Snapshots).
//
// With snapshots, a BACKFILL replica restores the newest usable snapshot
// when the shard's etcd pointer (<root>/snapshots/<shard>) is ahead of its
// local database (or the log was truncated past it), then replays the log
// after it; a primary snapshots after every snapshot_interval_bytes of log
// it wrote, on a background goroutine (one at a time; transactions go on),
// and truncates the log before the oldest of the snapshots_kept snapshots.
// A failed snapshot is logged and retried after the next interval; it never
// fails the shard. A standby that falls so far behind that the log was
// truncated past it restores a snapshot and starts over (maxRebootstraps
// times at most). With the log truncated and no usable snapshot, the
// replica goes FAILED with an error saying so. See package
// recoverylog/snapshot.
type SnapshotOptions struct {
	// Store holds snapshot objects (required).
	Store snapshot.Store
	// Etcd is the client for the pointers (required); they live under the
	// member's prefix.
	Etcd *clientv3.Client
	// CheckInterval is how often a primary checks whether a snapshot is due
	// (zero: DefaultSnapshotCheckInterval).
	CheckInterval time.Duration
	// Hook, when set, is passed to every Snapshotter (fault injection in tests).
	Hook func(shard string, step snapshot.Step) error
}

// errStandbyBehind marks a standby whose log was truncated past it while
// it tailed (it fell more than snapshots_kept snapshots behind).
var errStandbyBehind = errors.New("standby fell behind the truncated recovery log")

// maxRebootstraps bounds how often one replica restarts from a snapshot
// after falling behind, before it fails.
const maxRebootstraps = 3

// rebootstrap reports whether the replica should start its lifecycle over
// (restoring a snapshot) after err: with snapshots, when a standby fell
// behind the truncated log, at most maxRebootstraps times.
func (r *replica) rebootstrap(ctx context.Context, err error, n int) bool {
	if ctx.Err() != nil || r.snapshots() == nil || !errors.Is(err, errStandbyBehind) || n > maxRebootstraps {
		return false
	}
	r.logger.Warn("standby fell behind the truncated recovery log: restoring a snapshot", "error", err, "attempt", n)
	return true
}

func (r *replica) snapshots() *SnapshotOptions {
	so := r.svc.cfg.Snapshots
	if so == nil || so.Store == nil || so.Etcd == nil {
		return nil
	}
	return so
}

func (r *replica) prefix() string { return r.svc.cfg.Member.KeySpace().Prefix() }

// restoreSnapshot restores the newest usable snapshot into dir. With
// ifNewer, it first checks the local database there and restores only when
// the etcd pointer covers more of the log (a newer local database is
// reused). It reports whether it restored; ErrNoSnapshot is wrapped when
// none was usable.
func (r *replica) restoreSnapshot(ctx context.Context, dir string, c Consumer, ifNewer bool) (bool, error) {
	so := r.snapshots()
	if so == nil {
		return false, nil
	}
	ptr, ok, err := snapshot.LoadPointer(ctx, so.Etcd, r.prefix(), r.id)
	if err != nil {
		return false, err
	}
	if ifNewer {
		if !ok {
			return false, nil
		}
		local, err := localPosition(dir, c, r.svc.cfg.Memory)
		if err != nil {
			r.logger.Warn("local database unreadable; restoring the snapshot instead", "dir", dir, "error", err)
		} else if uint64(local.LogID) >= ptr.LogID {
			r.logger.Info("local database is at or past the newest snapshot: reusing it", "local", local.String(), "snapshot", ptr.ID)
			return false, nil
		}
	}
	opts, release, err := DBOptions(c, r.svc.cfg.Memory) // without the Filterer: enough to open a snapshot read-only
	if err != nil {
		return false, err
	}
	defer release()
	var p *snapshot.Pointer
	if ok {
		p = &ptr
	}
	if _, err := snapshot.Restore(ctx, snapshot.RestoreConfig{
		Store: so.Store, Shard: r.id, Pointer: p, Dir: dir, Options: opts, Logger: r.logger,
	}); err != nil {
		return false, err
	}
	return true, nil
}

// localPosition reads the position of the database at dir, zero if there is none.
func localPosition(dir string, c Consumer, mem *rocksmem.Budget) (recoverylog.Position, error) {
	if _, err := os.Stat(filepath.Join(dir, "CURRENT")); errors.Is(err, os.ErrNotExist) {
		return recoverylog.Position{}, nil
	}
	opts, release, err := DBOptions(c, mem)
	if err != nil {
		return recoverylog.Position{}, err
	}
	defer release()
	db, err := grocksdb.OpenDbForReadOnly(opts, dir, false)
	if err != nil {
		return recoverylog.Position{}, err
	}
	defer db.Close()
	return recoverylog.LoadPosition(db)
}

// recoverTruncated handles a replay that failed because the log no longer
// holds the local database's position (err wraps wal.ErrTruncated): it
// restores a snapshot into dir (or, without snapshots, wipes a non-empty
// database to rebuild from the log). It returns an error when the shard
// cannot be rebuilt: it must go FAILED rather than serve wrong state.
func (r *replica) recoverTruncated(ctx context.Context, dir string, c Consumer, pos recoverylog.Position, cause error) error {
	if r.snapshots() == nil {
		if pos == (recoverylog.Position{}) {
			return fmt.Errorf("replay recovery log: %w", cause)
		}
		r.logger.Warn("local database is behind the truncated recovery log: rebuilding", "position", pos.String(), "error", cause)
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("wipe stale shard database %s: %w", dir, err)
		}
		return nil
	}
	r.logger.Warn("recovery log truncated past the local database: restoring a snapshot", "position", pos.String(), "error", cause)
	if _, err := r.restoreSnapshot(ctx, dir, c, false); err != nil {
		if errors.Is(err, snapshot.ErrNoSnapshot) {
			return fmt.Errorf("recovery log truncated past the database position (%v) and no usable snapshot: %w (replay: %w)", pos, err, cause)
		}
		return fmt.Errorf("restore snapshot after truncation: %w", err)
	}
	return nil
}

// startSnapshots runs the primary's snapshot goroutine until the returned
// stop is called (before the database closes). It snapshots after every
// spec.EffectiveSnapshotIntervalBytes of log the Recorder applied.
func (r *replica) startSnapshots(ctx context.Context, sdb *shardDB, rec *recoverylog.Recorder, w wal.WAL, a allocator.Assignment, term uint64) (stop func()) {
	so := r.snapshots()
	if so == nil {
		return func() {}
	}
	spec := r.currentSpec()
	var hook func(snapshot.Step) error
	if so.Hook != nil {
		hook = func(s snapshot.Step) error { return so.Hook(r.id, s) }
	}
	s, err := snapshot.NewSnapshotter(snapshot.Config{
		Shard: r.id, Store: so.Store, Etcd: so.Etcd, Prefix: r.prefix(),
		ScratchDir: filepath.Join(r.svc.cfg.DataDir, "checkpoints", r.id),
		Kept:       spec.EffectiveSnapshotsKept(), Options: sdb.opts, Logger: r.logger, Hook: hook,
	})
	if err != nil {
		r.logger.Error("snapshots disabled for this primary", "error", err)
		return func() {}
	}
	every := so.CheckInterval
	if every <= 0 {
		every = DefaultSnapshotCheckInterval
	}
	src := snapshot.Source{
		DB: sdb.db, Recorder: rec, Log: w, Term: term,
		Guard: snapshot.Guard{Key: allocator.AssignmentKey(r.prefix(), a), CreateRevision: a.CreateRevision},
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		base := rec.AppliedBytes()
		r.loadLastSnapshot(sctx, so)
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
			if rec.AppliedBytes()-base < r.currentSpec().EffectiveSnapshotIntervalBytes() {
				continue
			}
			base = rec.AppliedBytes()
			res, err := s.Take(sctx, src)
			if res != nil { // the pointer moved (err: only retention failed)
				r.snapshotted(SnapshotInfoOf(snapshot.PointerOf(res.Manifest)), base)
			}
			switch {
			case err == nil:
				r.logger.Info("snapshot", "id", res.Manifest.ID, "log_id", res.Manifest.LogID,
					"uploaded_bytes", res.UploadedBytes, "reused_bytes", res.ReusedBytes,
					"truncated_before", res.Retain.TruncatedBefore, "took", res.Duration)
			case sctx.Err() != nil:
				return
			case errors.Is(err, snapshot.ErrNotPrimary), errors.Is(err, wal.ErrFenced), errors.Is(err, recoverylog.ErrRecorderClosed):
				r.logger.Warn("snapshots stopped: no longer the writer", "error", err)
				return
			default:
				r.logger.Warn("snapshot failed; retrying after the next interval", "error", err)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
