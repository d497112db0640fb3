package snapshot

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics, registered on the default Prometheus registry. Counters carry a
// "shard" label (bounded by the shards hosted here); histograms do not.
var (
	snapshotDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "consumerd_snapshot_duration_seconds",
		Help:    "Time to take one snapshot: checkpoint, upload, manifest, Snapshot record, etcd pointer, truncation and garbage collection.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 12),
	})
	snapshotUploadedBytes = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_snapshot_uploaded_bytes_total",
		Help: "Bytes of snapshot files uploaded to the snapshot store (SSTs the store lacked, plus every non-SST file and manifest).",
	}, []string{"shard"})
	snapshotReusedFiles = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_snapshot_reused_files_total",
		Help: "SST files of a snapshot the store already held (not uploaded again).",
	}, []string{"shard"})
	snapshotCompactions = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_snapshot_compactions_total",
		Help: "Snapshots that compacted the shard database first, because it held more than Config.CompactAbove times its estimated live data.",
	}, []string{"shard"})
	snapshotFailures = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_snapshot_failures_total",
		Help: "Snapshots that failed before their etcd pointer was updated.",
	}, []string{"shard"})
	truncatedMessages = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_recoverylog_truncated_messages_total",
		Help: "Recovery-log messages removed by truncation before the oldest snapshot kept.",
	}, []string{"shard"})
	restoreDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "consumerd_snapshot_restore_duration_seconds",
		Help:    "Time to restore a snapshot into a shard database directory (download, verification, open), fallbacks included.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 12),
	})
	restoreFallbacks = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_snapshot_restore_fallbacks_total",
		Help: "Snapshots skipped on restore because a file was missing or corrupt, or the manifest was unusable.",
	}, []string{"shard"})
)
