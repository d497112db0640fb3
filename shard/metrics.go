package shard

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Prometheus metrics of the shard layer (DESIGN §8). Shard labels are
// bounded by the member's item limit; channel labels by a shard's sources.
var (
	metricStatus = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "consumerd_shard_status",
		Help: "Number of this process's shard replicas in each state.",
	}, []string{"state"})
	metricTransactions = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_shard_transactions_total",
		Help: "Transactions committed and applied by shard primaries.",
	}, []string{"shard"})
	metricMessages = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_shard_messages_consumed_total",
		Help: "Source messages passed to Consume.",
	}, []string{"shard"})
	metricBytes = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_shard_bytes_consumed_total",
		Help: "Bytes of source messages passed to Consume.",
	}, []string{"shard"})
	metricTxnDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "consumerd_shard_txn_duration_seconds",
		Help:    "Time from a transaction's first message until its commit was applied.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	})
	metricSourceLag = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "consumerd_shard_source_lag_messages",
		Help: "Messages of a source channel not yet committed by its shard primary (last id - committed offset; negative when the channel lost messages the shard read).",
	}, []string{"shard", "channel"})
	metricSourceLost = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_shard_source_lost_total",
		Help: "Shard replicas that stopped FAILED because a source channel lost messages they had not read (removed and re-created, went backwards, purged or trimmed ahead of the offset).",
	}, []string{"shard", "channel"})
	metricFailures = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_shard_failures_total",
		Help: "Shard replicas that stopped in state FAILED.",
	}, []string{"shard"})
	metricRestarts = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_shard_restarts_total",
		Help: "Shard replicas restarted by themselves after a transient failure of the WAL or etcd.",
	}, []string{"shard"})
	metricDamagedDBs = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_shard_damaged_databases_total",
		Help: "Local shard databases found damaged, moved aside (under <data-dir>/damaged/) and rebuilt from the recovery log.",
	}, []string{"shard"})
	metricOutputsPublished = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_shard_outputs_published_total",
		Help: "Output messages of committed transactions published (exactly once) by this process's primaries.",
	}, []string{"shard"})
	metricOutputMarkersLost = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_shard_output_markers_lost_total",
		Help: "Output partitions whose marker chain lost the markers the shard had published (the stream re-created, purged or trimmed by its limits): their pending outputs go out again without a marker to say which were out (at least once).",
	}, []string{"shard", "channel"})
	// metricUnpublished is set while the shard's primary runs on this
	// process, deleted when it stops.
	metricUnpublished = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "consumerd_shard_unpublished_output_transactions",
		Help: "Committed transactions of the shard's primary on this process whose outputs are not all published yet.",
	}, []string{"shard"})
)

// A primary's commit and snapshot gauges (primarystats.go): set while the
// shard's primary runs on this process, deleted when it stops being primary
// here. Alert rules use these names.
var (
	metricLastCommit = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "consumerd_shard_last_commit_timestamp_seconds",
		Help: "Unix time at which the shard's primary on this process last applied a committed transaction (absent before its first).",
	}, []string{"shard"})
	metricSnapshotLastSuccess = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "consumerd_snapshot_last_success_timestamp_seconds",
		Help: "Creation time (Unix) of the shard's newest snapshot, as its primary on this process knows it: the last it took, else the one etcd named when it took over.",
	}, []string{"shard"})
	metricLogBytesSinceSnapshot = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "consumerd_recoverylog_bytes_since_snapshot",
		Help: "Recovery-log bytes the shard's primary on this process appended since its last snapshot (since it took over, before its first): what snapshot_interval_bytes is compared with. Absent when snapshots are off.",
	}, []string{"shard"})
)

// metricOutputsDropped counts committed outputs an operator dropped
// unpublished ('consumerd shards outputs --drop', outputdrop.go).
var metricOutputsDropped = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "consumerd_shard_outputs_dropped_total",
	Help: "Committed outputs dropped unpublished by an operator (shards outputs --drop), applied by this process's primaries.",
}, []string{"shard"})
