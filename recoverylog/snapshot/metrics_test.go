package snapshot

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// TestMetricsLint checks the snapshot metrics against Prometheus' naming
// conventions (what promtool check metrics reports) and the names the
// issue asks for.
func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	cs := []prometheus.Collector{snapshotDuration, snapshotUploadedBytes, snapshotReusedFiles, snapshotFailures,
		truncatedMessages, restoreDuration, restoreFallbacks}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []*prometheus.CounterVec{snapshotUploadedBytes, snapshotReusedFiles, snapshotFailures, truncatedMessages, restoreFallbacks} {
		v.WithLabelValues("lint").Add(0)
		defer v.DeleteLabelValues("lint")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	got := strings.Join(names, " ")
	for _, want := range []string{"consumerd_snapshot_duration_seconds", "consumerd_snapshot_uploaded_bytes_total",
		"consumerd_snapshot_reused_files_total", "consumerd_recoverylog_truncated_messages_total", "consumerd_snapshot_restore_duration_seconds"} {
		if !strings.Contains(got, want) {
			t.Errorf("metric %s missing from %s", want, got)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}
