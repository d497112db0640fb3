package shard

import (
	"context"
	"time"

	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	"github.com/consumerd/consumerd/wal/message"
)

// SnapshotInfo describes one snapshot of a shard (ReplicaInfo.LastSnapshot).
type SnapshotInfo struct {
	// ID is the snapshot id, "<log id>-<term>-<random>" (see package
	// recoverylog/snapshot).
	ID string `json:"id"`
	// Manifest is the manifest's object name in the snapshot store.
	Manifest string `json:"manifest"`
	// Created is when the snapshot's checkpoint was taken.
	Created time.Time `json:"created"`
	// Bytes is the total size of the snapshot's files.
	Bytes int64 `json:"bytes"`
	// LogID is the recovery-log id the snapshot covers.
	LogID message.MessageID `json:"log_id"`
}

// SnapshotInfoOf is the SnapshotInfo of the snapshot p points at.
func SnapshotInfoOf(p snapshot.Pointer) SnapshotInfo {
	return SnapshotInfo{ID: p.ID, Manifest: p.Manifest, Created: p.Created, Bytes: p.Size, LogID: message.MessageID(p.LogID)}
}

// primaryStats is what a primary reports about its commits and snapshots
// (ReplicaInfo.LastCommitAt, LastSnapshot, LogBytesSinceSnapshot and their
// gauges). It is guarded by replica.mu and zero while the replica is not
// primary here.
type primaryStats struct {
	// logBytes is the Recorder's AppliedBytes: the bytes of log this
	// primary appended and applied. Nil when not primary, and when
	// snapshots are off (there is no snapshot to count from).
	logBytes func() int64
	// snapBase is logBytes() when the last snapshot was taken (0 before
	// this primary took one).
	snapBase   int64
	lastCommit time.Time
	lastSnap   *SnapshotInfo
}

// startStats begins a primary's stats; with snapshots on, it counts the
// log bytes rec applies. The returned stop clears them and deletes the
// shard's series of the three gauges: called when the replica stops being
// primary here (after the transaction loop and the snapshot goroutine
// stopped), so no series of a shard this process no longer leads is left
// behind.
func (r *replica) startStats(rec *recoverylog.Recorder, snapshots bool) (stop func()) {
	var st primaryStats
	if snapshots {
		st.logBytes, st.snapBase = rec.AppliedBytes, rec.AppliedBytes()
		metricLogBytesSinceSnapshot.WithLabelValues(r.id).Set(0)
	}
	r.mu.Lock()
	r.stats = st
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.stats = primaryStats{}
		r.mu.Unlock()
		metricLastCommit.DeleteLabelValues(r.id)
		metricSnapshotLastSuccess.DeleteLabelValues(r.id)
		metricLogBytesSinceSnapshot.DeleteLabelValues(r.id)
	}
}

// committed records that the transaction loop applied a commit at now
// that brought the database to log id applied.
func (r *replica) committed(applied int64, now time.Time) {
	r.mu.Lock()
	r.applied = applied
	st := &r.stats
	st.lastCommit = now
	since := int64(-1)
	if st.logBytes != nil {
		since = st.logBytes() - st.snapBase
	}
	r.mu.Unlock()
	metricLastCommit.WithLabelValues(r.id).Set(float64(now.UnixNano()) / 1e9)
	if since >= 0 {
		metricLogBytesSinceSnapshot.WithLabelValues(r.id).Set(float64(since))
	}
}

// snapshotted records the shard's newest snapshot: one this primary took
// when logBytesAt >= 0 (the Recorder's AppliedBytes when it started; the
// bytes since the snapshot count from there), or one found in etcd when it
// took over (logBytesAt < 0: the count stays as it is).
func (r *replica) snapshotted(info SnapshotInfo, logBytesAt int64) {
	r.mu.Lock()
	st := &r.stats
	if st.logBytes == nil { // not primary (stop was called), or snapshots off
		r.mu.Unlock()
		return
	}
	st.lastSnap = &info
	if logBytesAt >= 0 {
		st.snapBase = logBytesAt
	}
	since := st.logBytes() - st.snapBase
	r.mu.Unlock()
	metricSnapshotLastSuccess.WithLabelValues(r.id).Set(float64(info.Created.UnixNano()) / 1e9)
	metricLogBytesSinceSnapshot.WithLabelValues(r.id).Set(float64(since))
}

// loadLastSnapshot records the snapshot the shard's etcd pointer names, if
// any (a primary taking over learns of its predecessors' snapshots). A
// failure is logged at debug: the next snapshot sets it anyway.
func (r *replica) loadLastSnapshot(ctx context.Context, so *SnapshotOptions) {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p, ok, err := snapshot.LoadPointer(lctx, so.Etcd, r.prefix(), r.id)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			r.logger.Debug("reading the snapshot pointer for status", "error", err)
		}
	case ok:
		r.snapshotted(SnapshotInfoOf(p), -1)
	}
}

// fillStats sets ri's primary fields; called with r.mu held.
func (st *primaryStats) fillStats(ri *ReplicaInfo) {
	ri.LastCommitAt = st.lastCommit
	if st.lastSnap != nil {
		s := *st.lastSnap
		ri.LastSnapshot = &s
	}
	if st.logBytes != nil {
		ri.LogBytesSinceSnapshot = st.logBytes() - st.snapBase
	}
}
