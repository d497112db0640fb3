package wal_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

func TestTransientErrorRetried(t *testing.T) {
	for _, shuffled := range []bool{false, true} {
		t.Run(fmt.Sprintf("shuffled=%v", shuffled), func(t *testing.T) {
			e := newEnv(t, shuffled)
			h := &hookCounter{fail: 2, err: errTransient}
			e.mem.SetAppendHook(h.hook)
			w := e.open(t, "t/0000", 0)
			r, err := w.Append(context.Background(), msg("a"))
			if err != nil {
				t.Fatalf("append with 2 transient failures: %v", err)
			}
			if got := h.calls.Load(); got != 3 {
				t.Fatalf("backend attempts = %d, want 3", got)
			}
			got := readAll(t, w)
			if len(got) != 1 || got[0].ID != r.MessageID || string(got[0].Payload) != "a" {
				t.Fatalf("read back %v, want exactly one message id %d", payloads(got), r.MessageID)
			}
			if !w.IsAvailable() {
				t.Fatal("WAL unavailable after a retried transient error")
			}
		})
	}
}

func TestRetryGivesUpAfterAttempts(t *testing.T) {
	e := newEnv(t, false, wal.WithRetry(time.Millisecond, 2*time.Millisecond, 3))
	h := &hookCounter{fail: 1 << 40, err: errTransient}
	e.mem.SetAppendHook(h.hook)
	w := e.open(t, "t/0000", 0)
	_, err := w.Append(context.Background(), msg("a"))
	if !errors.Is(err, errTransient) {
		t.Fatalf("error %v does not wrap the backend error", err)
	}
	if got := h.calls.Load(); got != 3 {
		t.Fatalf("attempts = %d, want 3", got)
	}
	if !w.IsAvailable() {
		t.Fatal("a transient error made the WAL unavailable")
	}
}

func TestPermanentErrorNotRetried(t *testing.T) {
	e := newEnv(t, false)
	h := &hookCounter{fail: 1 << 40, err: walimpls.Permanent(errors.New("too large"))}
	e.mem.SetAppendHook(h.hook)
	w := e.open(t, "t/0000", 0)
	if _, err := w.Append(context.Background(), msg("a")); err == nil {
		t.Fatal("append succeeded despite a permanent error")
	}
	if got := h.calls.Load(); got != 1 {
		t.Fatalf("attempts = %d, want 1", got)
	}
}

func TestFencedNotRetried(t *testing.T) {
	for _, shuffled := range []bool{false, true} {
		t.Run(fmt.Sprintf("shuffled=%v", shuffled), func(t *testing.T) {
			e := newEnv(t, shuffled)
			ctx := context.Background()
			w1 := e.open(t, "recovery/s", 1)
			if _, err := w1.Append(ctx, msg("a")); err != nil {
				t.Fatal(err)
			}
			h := &hookCounter{}
			e.mem.SetAppendHook(h.hook)
			w2 := e.open(t, "recovery/s", 2)
			_, err := w1.Append(ctx, msg("b"))
			if !errors.Is(err, wal.ErrFenced) {
				t.Fatalf("append after fencing: %v, want ErrFenced", err)
			}
			if got := h.calls.Load(); got != 1 {
				t.Fatalf("backend attempts for a fenced append = %d, want 1", got)
			}
			select {
			case <-w1.Available():
			default:
				t.Fatal("Available not closed after ErrFenced")
			}
			if w1.IsAvailable() {
				t.Fatal("IsAvailable true after ErrFenced")
			}
			// Later appends fail at once, without reaching the backend.
			done := make(chan error, 1)
			w1.AppendAsync(ctx, msg("c"), func(_ *wal.AppendResult, err error) { done <- err })
			if err := <-done; !errors.Is(err, wal.ErrFenced) {
				t.Fatalf("async append after fencing: %v, want ErrFenced", err)
			}
			if got := h.calls.Load(); got != 1 {
				t.Fatalf("backend attempts after fencing = %d, want 1", got)
			}
			if _, err := w2.Append(ctx, msg("d")); err != nil {
				t.Fatalf("append of the new writer: %v", err)
			}
			if got := payloads(readAll(t, w2)); !equal(got, []string{"a", "d"}) {
				t.Fatalf("log = %v, want [a d]", got)
			}
			if !w2.IsAvailable() {
				t.Fatal("new writer unavailable")
			}
		})
	}
}

func TestContextCancelNotRetried(t *testing.T) {
	e := newEnv(t, false, wal.WithRetry(time.Millisecond, time.Millisecond, 0))
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int64
	e.mem.SetAppendHook(func(_ string, _ *message.MutableMessage, st memory.Stage) error {
		if st == memory.BeforeStore {
			calls.Add(1)
			cancel()
			return errTransient
		}
		return nil
	})
	w := e.open(t, "t/0000", 0)
	_, err := w.Append(ctx, msg("a"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("attempts = %d, want 1", got)
	}
	if !w.IsAvailable() {
		t.Fatal("a cancelled append made the WAL unavailable")
	}
}

func TestContextDeadlineStopsRetrying(t *testing.T) {
	// Unlimited attempts: only the deadline ends the retries. The third
	// attempt outlives the deadline; no fourth may follow.
	e := newEnv(t, false, wal.WithRetry(time.Millisecond, 2*time.Millisecond, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var calls atomic.Int64
	e.mem.SetAppendHook(func(_ string, _ *message.MutableMessage, st memory.Stage) error {
		if st == memory.BeforeStore && calls.Add(1) == 3 {
			<-ctx.Done()
		}
		return errTransient
	})
	w := e.open(t, "t/0000", 0)
	_, err := w.Append(ctx, msg("a"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want DeadlineExceeded", err)
	}
	// Append returns when ctx ends; the dispatcher finishes the item on its
	// own, and Close waits for it.
	w.Close()
	if got := calls.Load(); got != 3 {
		t.Fatalf("attempts = %d, want 3 (2 retries, none after the deadline)", got)
	}
}

// TestBatchRetries: a transient failure before the batch was stored is
// retried; a lost acknowledgement is retried too, and the retry finds the
// chain moved (ErrStaleChain) — LastMarker then shows the batch is there.
func TestBatchRetries(t *testing.T) {
	e := newEnv(t, false)
	w := e.open(t, "out/0000", 0)
	var before, after atomic.Int64
	e.mem.SetAppendHook(func(_ string, m *message.MutableMessage, st memory.Stage) error {
		switch {
		case st == memory.BeforeStore && before.Add(1) <= 2:
			return errTransient
		case st == memory.AfterStore && m.Properties["marker"] != "" && after.Add(1) == 2:
			return errTransient // the second batch's acknowledgement is lost
		}
		return nil
	})
	ctx := context.Background()
	r1, err := w.AppendBatch(ctx, wal.Batch{Messages: []message.MutableMessage{msg("a"), msg("b")}, Chain: "s", Marker: []byte("1")})
	if err != nil {
		t.Fatalf("batch with transient failures before storing: %v", err)
	}
	_, err = w.AppendBatch(ctx, wal.Batch{Messages: []message.MutableMessage{msg("c")}, Chain: "s", Marker: []byte("2"), After: r1.MarkerID})
	if !errors.Is(err, wal.ErrStaleChain) {
		t.Fatalf("batch whose acknowledgement was lost: %v, want ErrStaleChain from the retry", err)
	}
	if m, err := w.LastMarker(ctx, "s"); err != nil || string(m.Payload) != "2" {
		t.Fatalf("LastMarker = %+v, %v; want the second batch's marker", m, err)
	}
	if got := payloads(readAll(t, w)); !equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("log = %v, want each batch once", got)
	}
	if n, atomic := w.BatchLimits(); n != memory.MaxBatch || !atomic {
		t.Fatalf("BatchLimits = %d, %v", n, atomic)
	}
}
