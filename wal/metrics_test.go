package wal

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestMetricsAndLogging(t *testing.T) {
	var logs syncBuffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})
	op, err := NewOpenerBuilder(memory.NewBuilder(), WithLogger(logger)).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	ctx := context.Background()
	w1, err := op.Open(ctx, &OpenOption{Channel: "recovery/m", Term: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()

	appends := counter(t, "consumerd_wal_appends_total", "")
	bytesBefore := counter(t, "consumerd_wal_append_bytes_total", "")
	fencedBefore := counter(t, "consumerd_wal_append_errors_total", "fenced")
	scanned := counter(t, "consumerd_wal_scanner_messages_total", "")
	durations := histogramCount(t, "consumerd_wal_append_duration_seconds")

	m := message.MutableMessage{Key: "key", Payload: []byte("payload"), Properties: map[string]string{"a": "b"}}
	for i := 0; i < 3; i++ {
		if _, err := w1.Append(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	w2, err := op.Open(ctx, &OpenOption{Channel: "recovery/m", Term: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if _, err := w1.Append(ctx, m); !errors.Is(err, ErrFenced) {
		t.Fatalf("append after fencing: %v", err)
	}
	s, err := w2.Read(ctx, ReadOption{DeliverPolicy: DeliverAll()})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		<-s.Chan()
	}
	s.Close()

	if got := counter(t, "consumerd_wal_appends_total", "") - appends; got != 3 {
		t.Errorf("appends_total grew by %v, want 3", got)
	}
	if got := counter(t, "consumerd_wal_append_bytes_total", "") - bytesBefore; got != float64(3*m.Size()) {
		t.Errorf("append_bytes_total grew by %v, want %d", got, 3*m.Size())
	}
	if got := counter(t, "consumerd_wal_append_errors_total", "fenced") - fencedBefore; got != 1 {
		t.Errorf("append_errors_total{reason=fenced} grew by %v, want 1", got)
	}
	// The third message may still sit in the handler when Close cut it off.
	if got := counter(t, "consumerd_wal_scanner_messages_total", "") - scanned; got < 3 {
		t.Errorf("scanner_messages_total grew by %v, want >= 3", got)
	}
	// Latency is sampled one append in 8, starting with the first.
	if got := histogramCount(t, "consumerd_wal_append_duration_seconds") - durations; got != 1 {
		t.Errorf("append_duration_seconds count grew by %d, want 1 (the first of 4 appends)", got)
	}
	if out := logs.String(); !strings.Contains(out, "WAL fenced") || !strings.Contains(out, "channel=recovery/m") {
		t.Errorf("log lacks the fencing warning with the channel:\n%s", out)
	}
}

// memorySeries returns the series of metric name with backend="memory" (and
// reason=reason when reason is not empty).
func memorySeries(t *testing.T, name, reason string) []*dto.Metric {
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
			ok := false
			for _, l := range m.GetLabel() {
				if l.GetName() == "backend" && l.GetValue() == "memory" {
					ok = true
				}
				if reason != "" && l.GetName() == "reason" && l.GetValue() != reason {
					ok = false
					break
				}
			}
			if ok {
				out = append(out, m)
			}
		}
	}
	return out
}

func counter(t *testing.T, name, reason string) float64 {
	t.Helper()
	var v float64
	for _, m := range memorySeries(t, name, reason) {
		v += m.GetCounter().GetValue()
	}
	return v
}

func histogramCount(t *testing.T, name string) uint64 {
	t.Helper()
	var n uint64
	for _, m := range memorySeries(t, name, "") {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}
