package allocator

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// TestMetricsLint checks the allocator's metrics with Prometheus' linter
// (the checks promtool check metrics runs) and their names.
func TestMetricsLint(t *testing.T) {
	collectors := []prometheus.Collector{leaderGauge, membersGauge, itemsGauge, desiredSlotsGauge, shortfallGauge,
		assignmentsAdded, assignmentsRemoved, assignmentsPromoted, convergeRounds, convergeTxns, scheduleSeconds,
		etcdErrors, malformedKeys, convergeConflicts, loadMovesTotal, loadUnsettledGauge}
	reg := prometheus.NewPedanticRegistry()
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	scheduleSeconds.Observe(0.01)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	if len(mfs) != len(collectors) {
		t.Fatalf("gathered %d families, want %d", len(mfs), len(collectors))
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "consumerd_") {
			t.Errorf("metric %s lacks the consumerd_ prefix", mf.GetName())
		}
	}
}
