package allocator

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Allocator metrics. They are process-wide (one member per process in the
// daemon); tests running several members in one process share them.
var (
	leaderGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "consumerd_allocator_leader",
		Help: "1 while this member is the allocator leader, else 0.",
	})
	membersGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "consumerd_allocator_members",
		Help: "Members in the keyspace mirror.",
	})
	itemsGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "consumerd_allocator_items",
		Help: "Items in the keyspace mirror.",
	})
	desiredSlotsGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "consumerd_allocator_desired_slots",
		Help: "Replica slots wanted by all items (sum of desired replication), as last computed by the leader.",
	})
	shortfallGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "consumerd_allocator_shortfall_slots",
		Help: "Replica slots the leader could not place for lack of capacity.",
	})
	assignmentsAdded = promauto.NewCounter(prometheus.CounterOpts{
		Name: "consumerd_allocator_assignments_added_total",
		Help: "Assignments created by the leader (new replicas).",
	})
	assignmentsRemoved = promauto.NewCounter(prometheus.CounterOpts{
		Name: "consumerd_allocator_assignments_removed_total",
		Help: "Assignments deleted by the leader.",
	})
	assignmentsPromoted = promauto.NewCounter(prometheus.CounterOpts{
		Name: "consumerd_allocator_assignments_promoted_total",
		Help: "Replicas promoted to primary (slot 0) by the leader.",
	})
	convergeRounds = promauto.NewCounter(prometheus.CounterOpts{
		Name: "consumerd_allocator_converge_rounds_total",
		Help: "Converge rounds run by the leader.",
	})
	convergeTxns = promauto.NewCounter(prometheus.CounterOpts{
		Name: "consumerd_allocator_converge_txns_total",
		Help: "Transactions sent by the leader's converge rounds (including ones whose compares failed).",
	})
	convergeConflicts = promauto.NewCounter(prometheus.CounterOpts{
		Name: "consumerd_allocator_converge_conflicts_total",
		Help: "Leader transactions whose compares failed (something changed since the round's snapshot; the round is planned again).",
	})
	loadMovesTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "consumerd_allocator_load_moves_total",
		Help: "Primaries the leader planned to hand to a standby to balance members' load.",
	})
	loadUnsettledGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "consumerd_allocator_load_unsettled_items",
		Help: "Items whose primary's load is not reported yet; primaries are not moved for load while it is above 0.",
	})
	scheduleSeconds = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "consumerd_allocator_schedule_seconds",
		Help:    "Runtime of one scheduler solve.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	})
	etcdErrors = promauto.NewCounter(prometheus.CounterOpts{
		Name: "consumerd_etcd_errors_total",
		Help: "etcd requests that failed (errors, not compare failures).",
	})
	malformedKeys = promauto.NewCounter(prometheus.CounterOpts{
		Name: "consumerd_allocator_malformed_keys_total",
		Help: "Keys under the root that did not decode and were skipped.",
	})
)
