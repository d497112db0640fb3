package wal

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics of the adaptor, registered on the default Prometheus registry and
// labelled by backend name.
var (
	appendsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_wal_appends_total",
		Help: "Messages appended and acknowledged by the WAL backend.",
	}, []string{"backend"})
	appendBytesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_wal_append_bytes_total",
		Help: "Bytes (key, payload, properties) of messages appended and acknowledged.",
	}, []string{"backend"})
	appendErrorsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_wal_append_errors_total",
		Help: "Appends that failed for good, by reason (fenced, closed, context, truncated, other).",
	}, []string{"backend", "reason"})
	appendRetriesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_wal_append_retries_total",
		Help: "Backend operations retried after a transient error.",
	}, []string{"backend"})
	appendDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "consumerd_wal_append_duration_seconds",
		Help:    "Time from an append call to its acknowledgement or final error, retries included; pipelined appends are sampled, one in 8.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	}, []string{"backend"})
	scannerMessagesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_wal_scanner_messages_total",
		Help: "Messages delivered by WAL scanners after filtering.",
	}, []string{"backend"})
	scannerFilteredTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_wal_scanner_filtered_messages_total",
		Help: "Messages dropped by scanner filters.",
	}, []string{"backend"})
)
