package wal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestAppendErrorSeriesAtZero checks that a WAL's first open creates its
// backend's consumerd_wal_append_errors_total series of every reason at 0
// (so increase() sees the first error), and that errorReason never returns
// a reason outside that set.
func TestAppendErrorSeriesAtZero(t *testing.T) {
	newWALMetrics("zero-test")
	for _, reason := range appendErrorReasons {
		var found bool
		for _, m := range backendSeries(t, "consumerd_wal_append_errors_total", "zero-test") {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					found = true
					if v := m.GetCounter().GetValue(); v != 0 {
						t.Errorf("reason %s: %v, want 0", reason, v)
					}
				}
			}
		}
		if !found {
			t.Errorf("no consumerd_wal_append_errors_total{backend=\"zero-test\",reason=%q} series", reason)
		}
	}
	for _, err := range []error{ErrFenced, ErrClosed, context.Canceled, context.DeadlineExceeded, ErrTruncated,
		errors.New("boom"), fmt.Errorf("wrapped: %w", ErrFenced)} {
		if r := errorReason(err); !slices.Contains(appendErrorReasons, r) {
			t.Errorf("errorReason(%v) = %q, not one of %v", err, r, appendErrorReasons)
		}
	}
}

// backendSeries returns the series of metric name with label backend.
func backendSeries(t *testing.T, name, backend string) []*dto.Metric {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "backend" && l.GetValue() == backend {
					out = append(out, m)
				}
			}
		}
	}
	return out
}
