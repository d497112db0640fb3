package retry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

var errTransient = errors.New("transient")

func TestDoRetriesUntilSuccess(t *testing.T) {
	n := 0
	var waits []time.Duration
	err := Policy{Initial: time.Millisecond, Max: 4 * time.Millisecond}.Do(context.Background(), Call{
		OnRetry: func(attempt int, wait time.Duration, err error) { waits = append(waits, wait) },
	}, func() error {
		if n++; n < 5 {
			return errTransient
		}
		return nil
	})
	if err != nil || n != 5 {
		t.Fatalf("Do = %v after %d calls, want nil after 5", err, n)
	}
	// Nominal waits 1, 2, 4, 4 ms; each drawn from [d/2, d].
	nominal := []time.Duration{1, 2, 4, 4}
	if len(waits) != len(nominal) {
		t.Fatalf("waits %v, want %d", waits, len(nominal))
	}
	for i, w := range waits {
		d := nominal[i] * time.Millisecond
		if w < d/2 || w > d {
			t.Errorf("wait %d = %v, want in [%v, %v]", i, w, d/2, d)
		}
	}
}

func TestDoNotRetryable(t *testing.T) {
	perm := errors.New("permanent")
	n := 0
	err := Policy{Initial: time.Millisecond}.Do(context.Background(), Call{
		Retryable: func(err error) bool { return !errors.Is(err, perm) },
	}, func() error { n++; return perm })
	if err != perm || n != 1 {
		t.Fatalf("Do = %v after %d calls, want the permanent error after 1", err, n)
	}
}

func TestDoExhausted(t *testing.T) {
	n := 0
	err := Policy{Initial: time.Microsecond, Attempts: 3}.Do(context.Background(), Call{}, func() error { n++; return errTransient })
	if n != 3 || !errors.Is(err, ErrExhausted) || !errors.Is(err, errTransient) {
		t.Fatalf("Do = %v after %d calls, want ErrExhausted wrapping the last error after 3", err, n)
	}
	n = 0
	err = Policy{Attempts: 1}.Do(context.Background(), Call{}, func() error { n++; return errTransient })
	if n != 1 || !errors.Is(err, ErrExhausted) {
		t.Fatalf("Attempts 1: Do = %v after %d calls, want no retry", err, n)
	}
}

func TestDoStopsOnContextAndStop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := Policy{Initial: time.Hour}.Do(ctx, Call{OnRetry: func(int, time.Duration, error) { cancel() }},
		func() error { n++; return errTransient })
	if n != 1 || !errors.Is(err, context.Canceled) || !errors.Is(err, errTransient) {
		t.Fatalf("cancelled: Do = %v after %d calls", err, n)
	}
	stop := make(chan struct{})
	err = Policy{Initial: time.Hour}.Do(context.Background(), Call{Stop: stop, OnRetry: func(int, time.Duration, error) { close(stop) }},
		func() error { return errTransient })
	if !errors.Is(err, ErrStopped) || !errors.Is(err, errTransient) {
		t.Fatalf("stopped: Do = %v", err)
	}
	// A context error from fn itself is never retried.
	n = 0
	err = Policy{}.Do(context.Background(), Call{}, func() error { n++; return context.DeadlineExceeded })
	if n != 1 || err != context.DeadlineExceeded {
		t.Fatalf("fn's ctx error: Do = %v after %d calls", err, n)
	}
	// With RetryTimeouts, a try's own timeout is retried while ctx lives
	// (and Retryable accepts it); cancellation still ends Do.
	n = 0
	timeout := fmt.Errorf("no answer yet: %w", context.DeadlineExceeded)
	err = Policy{Initial: time.Millisecond}.Do(context.Background(), Call{RetryTimeouts: true},
		func() error {
			if n++; n < 3 {
				return timeout
			}
			return nil
		})
	if n != 3 || err != nil {
		t.Fatalf("RetryTimeouts: Do = %v after %d calls, want nil after 3", err, n)
	}
	n = 0
	err = Policy{}.Do(context.Background(), Call{RetryTimeouts: true}, func() error { n++; return context.Canceled })
	if n != 1 || err != context.Canceled {
		t.Fatalf("RetryTimeouts, canceled: Do = %v after %d calls", err, n)
	}
}

func TestBackoffResetAndCap(t *testing.T) {
	b := Policy{Initial: 8 * time.Millisecond, Max: 16 * time.Millisecond}.Start()
	for i, d := range []time.Duration{8, 16, 16} {
		w, ok := b.Next()
		d *= time.Millisecond
		if !ok || w < d/2 || w > d {
			t.Fatalf("step %d: wait %v ok %v, want in [%v, %v]", i, w, ok, d/2, d)
		}
	}
	if b.Attempt() != 3 {
		t.Fatalf("Attempt = %d, want 3", b.Attempt())
	}
	b.Reset()
	if w, _ := b.Next(); w > 8*time.Millisecond || b.Attempt() != 1 {
		t.Fatalf("after Reset: wait %v attempt %d", w, b.Attempt())
	}
	// Max below Initial is raised to Initial.
	b = Policy{Initial: 10 * time.Millisecond, Max: time.Millisecond}.Start()
	b.Next()
	if w, _ := b.Next(); w < 5*time.Millisecond || w > 10*time.Millisecond {
		t.Fatalf("Max below Initial: wait %v", w)
	}
}

func TestBackoffWaitExhausted(t *testing.T) {
	b := Policy{Initial: time.Microsecond, Attempts: 2}.Start()
	if err := b.Wait(context.Background(), nil); err != nil {
		t.Fatalf("first Wait: %v", err)
	}
	if err := b.Wait(context.Background(), nil); !errors.Is(err, ErrExhausted) {
		t.Fatalf("second Wait = %v, want ErrExhausted", err)
	}
}
