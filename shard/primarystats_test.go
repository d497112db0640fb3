package shard_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// The per-shard gauges of a primary (DESIGN §8), by their exact names.
const (
	gaugeLastCommit    = "consumerd_shard_last_commit_timestamp_seconds"
	gaugeLastSnapshot  = "consumerd_snapshot_last_success_timestamp_seconds"
	gaugeBytesSinceSnp = "consumerd_recoverylog_bytes_since_snapshot"
)

// gauge reads the value of a gauge's (or counter's) series for shardID
// from the default registry; ok is false when the series does not exist.
func gauge(t *testing.T, name, shardID string) (v float64, ok bool) {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "shard" && l.GetValue() == shardID {
					if c := m.GetCounter(); c != nil {
						return c.GetValue(), true
					}
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// unixSeconds is t as the gauges hold it.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// sameSeconds compares gauge values with times (float64 rounding).
func sameSeconds(a, b float64) bool { return math.Abs(a-b) < 1e-3 }

// replicaInfo is n's Service.Status entry of shardID.
func replicaInfo(n *shardtest.Node, shardID string) (shard.ReplicaInfo, bool) {
	for _, ri := range n.Service.Status() {
		if ri.Shard == shardID {
			return ri, true
		}
	}
	return shard.ReplicaInfo{}, false
}

// noSeries fails unless none of the three gauges has a series for shardID.
func noSeries(t *testing.T, shardID, when string) {
	t.Helper()
	if left := leftSeries(t, shardID); left != "" {
		t.Errorf("%s: %s is left behind", when, left)
	}
}

// leftSeries names the series of the three gauges shardID still has ("" if none).
func leftSeries(t *testing.T, shardID string) string {
	t.Helper()
	var left []string
	for _, name := range []string{gaugeLastCommit, gaugeLastSnapshot, gaugeBytesSinceSnp} {
		if v, ok := gauge(t, name, shardID); ok {
			left = append(left, fmt.Sprintf("%s{shard=%q} = %v", name, shardID, v))
		}
	}
	return strings.Join(left, ", ")
}

// TestPrimaryStatsWithSnapshots: a primary reports when it last committed,
// its newest snapshot (name, time, size: the etcd pointer's) and the log
// bytes since it, in Service.Status and in the three gauges, which agree;
// the series go when the primary stops; a primary taking over learns the
// newest snapshot from etcd before it takes one itself.
func TestPrimaryStatsWithSnapshots(t *testing.T) {
	e, _, spec := snapshotCluster(t)
	a := e.StartPrimary("a", t.TempDir(), spec)
	if ri, _ := replicaInfo(a, spec.ID); !ri.LastCommitAt.IsZero() || ri.LastSnapshot != nil {
		t.Fatalf("before any commit or snapshot: %+v", ri)
	}
	if _, ok := gauge(t, gaugeLastCommit, spec.ID); ok {
		t.Fatalf("%s present before the first commit", gaugeLastCommit)
	}
	if v, ok := gauge(t, gaugeBytesSinceSnp, spec.ID); !ok || v != 0 {
		t.Fatalf("%s = %v (present %v), want 0 at takeover", gaugeBytesSinceSnp, v, ok)
	}

	before := time.Now()
	lines := shardtest.Corpus(1, 5)
	e.Publish(0, lines...)
	if d := shardtest.DiffCounts(e.Counts(a, spec), wordcount.Count(lines)); d != "" {
		t.Fatal(d)
	}
	shardtest.Eventually(t, "the last commit in status and gauge", func() (bool, string) {
		ri, _ := replicaInfo(a, spec.ID)
		v, ok := gauge(t, gaugeLastCommit, spec.ID)
		b, bok := gauge(t, gaugeBytesSinceSnp, spec.ID)
		if ri.LastCommitAt.Before(before) || ri.LastCommitAt.After(time.Now()) {
			return false, fmt.Sprintf("last commit %v, published at %v", ri.LastCommitAt, before)
		}
		if !ok || !sameSeconds(v, unixSeconds(ri.LastCommitAt)) {
			return false, fmt.Sprintf("gauge %v (present %v), status %v", v, ok, ri.LastCommitAt)
		}
		if ri.LogBytesSinceSnapshot <= 0 || !bok || b != float64(ri.LogBytesSinceSnapshot) {
			return false, fmt.Sprintf("log bytes since snapshot %d, gauge %v (present %v)", ri.LogBytesSinceSnapshot, b, bok)
		}
		return true, ""
	})

	runUntilTruncated(t, e, a, spec, lines...)
	var ptr snapshot.Pointer
	shardtest.Eventually(t, "the status and gauges to show the pointer's snapshot", func() (bool, string) {
		var ok bool
		var err error
		ptr, ok, err = snapshot.LoadPointer(context.Background(), e.Client, e.Prefix, spec.ID)
		if err != nil || !ok {
			return false, fmt.Sprint("pointer: ", ok, err)
		}
		ri, _ := replicaInfo(a, spec.ID)
		s := ri.LastSnapshot
		if s == nil || s.ID != ptr.ID || s.Manifest != ptr.Manifest || s.Bytes != ptr.Size || !s.Created.Equal(ptr.Created) || uint64(s.LogID) != ptr.LogID {
			return false, fmt.Sprintf("status %+v, pointer %+v", s, ptr)
		}
		if v, ok := gauge(t, gaugeLastSnapshot, spec.ID); !ok || !sameSeconds(v, unixSeconds(ptr.Created)) {
			return false, fmt.Sprintf("%s = %v (present %v), pointer created %v", gaugeLastSnapshot, v, ok, ptr.Created)
		}
		// Quiet: every interval's worth of log has been snapshotted.
		b, _ := gauge(t, gaugeBytesSinceSnp, spec.ID)
		if ri.LogBytesSinceSnapshot >= spec.SnapshotIntervalBytes || b != float64(ri.LogBytesSinceSnapshot) {
			return false, fmt.Sprintf("log bytes since snapshot %d (gauge %v), interval %d", ri.LogBytesSinceSnapshot, b, spec.SnapshotIntervalBytes)
		}
		return true, ""
	})

	a.Kill()
	noSeries(t, spec.ID, "after the primary stopped")

	// A new primary knows the snapshot its predecessor took, from etcd.
	b := e.StartPrimary("b", t.TempDir(), spec)
	shardtest.Eventually(t, "the new primary to report its predecessor's snapshot", func() (bool, string) {
		ri, _ := replicaInfo(b, spec.ID)
		if ri.LastSnapshot == nil || ri.LastSnapshot.ID != ptr.ID {
			return false, fmt.Sprintf("status %+v, pointer %s", ri.LastSnapshot, ptr.ID)
		}
		v, ok := gauge(t, gaugeLastSnapshot, spec.ID)
		return ok && sameSeconds(v, unixSeconds(ptr.Created)), fmt.Sprintf("%s = %v (present %v)", gaugeLastSnapshot, v, ok)
	})
	if ri, _ := replicaInfo(b, spec.ID); !ri.LastCommitAt.IsZero() {
		t.Errorf("new primary reports a last commit %v before committing", ri.LastCommitAt)
	}
	if _, ok := gauge(t, gaugeLastCommit, spec.ID); ok {
		t.Errorf("%s present before the new primary's first commit", gaugeLastCommit)
	}
	b.Kill()
	noSeries(t, spec.ID, "after the second primary stopped")
}

// TestPrimaryStatsWithoutSnapshots: without a snapshot store a primary
// reports its last commit but no snapshot and no bytes since one (no
// gauge either); a standby reports none of it; when the primary's
// assignment goes (its process still running) its series go with it, and
// the promoted standby's appear.
func TestPrimaryStatsWithoutSnapshots(t *testing.T) {
	e := shardtest.NewCluster(t, memory.NewBuilder(), wordcount.App())
	spec := shardtest.WordcountSpec("stats-0", 0, 1)
	e.PutSpec(spec)
	a := e.StartPrimary("a", t.TempDir(), spec)
	b := e.StartNode("b", t.TempDir())
	e.Assign(b, spec.ID, 1)
	e.WaitState(b, spec.ID, 1, allocator.StateStandby)

	lines := shardtest.Corpus(2, 5)
	e.Publish(0, lines...)
	if d := shardtest.DiffCounts(e.Counts(a, spec), wordcount.Count(lines)); d != "" {
		t.Fatal(d)
	}
	shardtest.Eventually(t, "the primary's last commit", func() (bool, string) {
		ri, _ := replicaInfo(a, spec.ID)
		v, ok := gauge(t, gaugeLastCommit, spec.ID)
		return !ri.LastCommitAt.IsZero() && ok && sameSeconds(v, unixSeconds(ri.LastCommitAt)), fmt.Sprintf("status %v, gauge %v (present %v)", ri.LastCommitAt, v, ok)
	})
	if ri, _ := replicaInfo(a, spec.ID); ri.LastSnapshot != nil || ri.LogBytesSinceSnapshot != 0 {
		t.Errorf("primary without snapshots: last snapshot %+v, log bytes since %d", ri.LastSnapshot, ri.LogBytesSinceSnapshot)
	}
	for _, name := range []string{gaugeLastSnapshot, gaugeBytesSinceSnp} {
		if v, ok := gauge(t, name, spec.ID); ok {
			t.Errorf("%s = %v without snapshots", name, v)
		}
	}
	if ri, _ := replicaInfo(b, spec.ID); !ri.LastCommitAt.IsZero() || ri.LastSnapshot != nil || ri.LogBytesSinceSnapshot != 0 {
		t.Errorf("standby reports primary figures: %+v", ri)
	}

	// The primary's assignment goes; its process stays.
	key := allocator.AssignmentKey(e.Prefix, allocator.Assignment{Item: spec.ID, Zone: "z", Member: a.ID, Slot: 0})
	if _, err := e.Client.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	// Status drops the replica when its stop begins; the series go when it
	// has stopped (its last commit may still land in between).
	shardtest.Eventually(t, "the old primary's replica to stop and its series to go", func() (bool, string) {
		if _, ok := replicaInfo(a, spec.ID); ok {
			return false, "still listed"
		}
		left := leftSeries(t, spec.ID)
		return left == "", left
	})

	e.Promote(b, spec.ID, 1)
	e.WaitState(b, spec.ID, 0, allocator.StatePrimary)
	more := shardtest.Corpus(3, 5)
	e.Publish(0, more...)
	shardtest.Eventually(t, "the promoted primary's last commit", func() (bool, string) {
		ri, _ := replicaInfo(b, spec.ID)
		_, ok := gauge(t, gaugeLastCommit, spec.ID)
		return !ri.LastCommitAt.IsZero() && ok, fmt.Sprintf("status %v, gauge present %v", ri.LastCommitAt, ok)
	})
}
