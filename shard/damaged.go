package shard

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
)

// The local database is a cache of the recovery log: a database that cannot
// be opened because its files are damaged (RocksDB reports "Corruption: …":
// a truncated or missing SST, a deleted CURRENT, a garbled MANIFEST), or
// whose recovery-log position does not decode, is moved aside and rebuilt
// from the newest usable snapshot and the log. Damaged copies are kept for
// inspection under <DataDir>/damaged/, at most keptDamaged per shard.

// keptDamaged bounds the damaged copies kept per shard.
const keptDamaged = 2

// errDamagedDB marks an error of a local database that cannot be used.
var errDamagedDB = errors.New("local shard database is damaged")

// isDamaged reports whether err says the database's files are damaged
// (rather than, say, locked by another process or on a full disk: those are
// not the database's fault, and moving it aside would not help).
func isDamaged(err error) bool {
	return errors.Is(err, errDamagedDB) || strings.Contains(err.Error(), "Corruption:")
}

// moveAside moves the damaged database at dir aside (setAside) and, with
// snapshots configured, restores the newest snapshot into the now empty dir;
// replay then rebuilds the rest from the log.
func (r *replica) moveAside(ctx context.Context, dir string, c Consumer, cause error) error {
	if err := r.setAside(dir, cause, "local database is damaged: moved aside, rebuilding it from the recovery log"); err != nil {
		return err
	}
	if r.snapshots() == nil {
		return nil
	}
	if _, err := r.restoreSnapshot(ctx, dir, c, false); err != nil && !errors.Is(err, snapshot.ErrNoSnapshot) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.logger.Warn("restoring the newest snapshot failed; replaying the whole recovery log instead", "error", err)
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("clearing %s after a failed restore: %w", dir, err)
		}
	}
	return nil
}

// setAside moves the database at dir to <DataDir>/damaged/<shard>.<UTC
// time>, drops the oldest copies beyond keptDamaged, and logs msg as a WARN
// with the cause and where the copy went.
func (r *replica) setAside(dir string, cause error, msg string) error {
	root := filepath.Join(r.svc.cfg.DataDir, "damaged")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("moving database %s aside: %w (because: %w)", dir, err, cause)
	}
	to := filepath.Join(root, r.id+"."+time.Now().UTC().Format("20060102T150405.000000000Z"))
	if err := os.Rename(dir, to); err != nil {
		return fmt.Errorf("moving database %s aside: %w (because: %w)", dir, err, cause)
	}
	metricDamagedDBs.WithLabelValues(r.id).Inc()
	r.logger.Warn(msg, "error", cause, "moved_to", to, "kept", keptDamaged)
	old, _ := filepath.Glob(filepath.Join(root, r.id+".*"))
	sort.Strings(old) // the time sorts
	for len(old) > keptDamaged {
		if err := os.RemoveAll(old[0]); err != nil {
			r.logger.Warn("removing an old damaged copy", "dir", old[0], "error", err)
		}
		old = old[1:]
	}
	return nil
}

// logBehind handles a replay that found the recovery log behind the local
// database at pos (err wraps recoverylog.ErrLogBehind). When the spec's
// LogResetTerm accepts the loss for a database this old, the database
// is set aside and nil returned: replay rebuilds from what the log has.
// Otherwise it returns the error for FAILED, naming both positions and the
// operator's choices: a person must judge whether data can be restored.
func (r *replica) logBehind(dir string, pos recoverylog.Position, err error) error {
	if rr := r.currentSpec().LogResetTerm; rr > 0 && pos.Term < uint64(rr) {
		return r.setAside(dir, err, fmt.Sprintf("the recovery log lost records and 'shards reset' (log_reset_term %d) accepts the loss: "+
			"moved the local database aside, rebuilding the shard from what the log has", rr))
	}
	return fmt.Errorf("%w. The local database (%s) is kept and the shard stops here: either restore the WAL's data "+
		"and run 'consumerd shards unassign --failed --shard %s', or accept the loss with 'consumerd shards reset --shard %s --yes' "+
		"(--lost-log for every shard in this state; the shard is rebuilt from what the log has, and re-reads its sources from the offsets found there)", err, dir, r.id, r.id)
}
