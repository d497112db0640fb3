package shard

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// TestMetricsLint checks the shard metrics against Prometheus' naming
// conventions (what promtool check metrics reports).
func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	for _, c := range []prometheus.Collector{metricStatus, metricTransactions, metricMessages, metricBytes, metricTxnDuration, metricSourceLag, metricFailures,
		metricLastCommit, metricSnapshotLastSuccess, metricLogBytesSinceSnapshot} {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	metricStatus.WithLabelValues("PRIMARY").Add(0)
	metricTransactions.WithLabelValues("lint").Add(0)
	metricMessages.WithLabelValues("lint").Add(0)
	metricBytes.WithLabelValues("lint").Add(0)
	metricSourceLag.WithLabelValues("lint", "words/0000").Set(0)
	defer metricSourceLag.DeleteLabelValues("lint", "words/0000")
	metricFailures.WithLabelValues("lint").Add(0)
	for _, g := range []*prometheus.GaugeVec{metricLastCommit, metricSnapshotLastSuccess, metricLogBytesSinceSnapshot} {
		g.WithLabelValues("lint").Set(0)
		defer g.DeleteLabelValues("lint")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 10 {
		t.Fatalf("gathered %d metric families, want 10", len(mfs))
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}
