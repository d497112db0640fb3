package recoverylog

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics, registered on the default Prometheus registry. Counters carry a
// "shard" label (one series per shard hosted here); the histogram does not.
var (
	appendedBytesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_recoverylog_appended_bytes_total",
		Help: "Bytes of recovery-log records appended and acknowledged by the log.",
	}, []string{"shard"})
	replayedBytesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_recoverylog_replayed_bytes_total",
		Help: "Bytes of recovery-log records read by players (replay and tailing).",
	}, []string{"shard"})
	replayedRecordsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_recoverylog_applied_records_total",
		Help: "Recovery-log records applied to the shard DB by players.",
	}, []string{"shard"})
	skippedRecordsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_recoverylog_skipped_records_total",
		Help: "Recovery-log records ignored because they do not extend the chain, by reason (duplicate, branch, fenced, chunk).",
	}, []string{"shard", "reason"})
	replayRemaining = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "consumerd_recoverylog_replay_remaining_ids",
		Help: "Recovery-log ids a replay has left before it catches up with the log head seen at its start (0 once caught up).",
	}, []string{"shard"})
	replayDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "consumerd_recoverylog_replay_duration_seconds",
		Help:    "Time from the start of a replay until the player caught up with the log head seen at start.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 12),
	})
)
