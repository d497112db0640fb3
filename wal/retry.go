package wal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/consumerd/consumerd/wal/walimpls"
)

// retrier runs backend operations with exponential backoff.
type retrier struct {
	initial, max time.Duration
	attempts     int
	logger       hclog.Logger
	backend      string
}

// do runs fn until it succeeds, fails with an error that is not retryable
// (walimpls.IsRetryable), ctx ends, stop is closed (then the error wraps
// ErrClosed), or the attempts are used up. The returned error is fn's last
// error, wrapped with the reason retrying stopped.
func (r retrier) do(ctx context.Context, stop <-chan struct{}, op string, fn func() error) error {
	wait := r.initial
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			return nil
		}
		if !walimpls.IsRetryable(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (last error: %v)", op, ctx.Err(), err)
		}
		if r.attempts > 0 && attempt >= r.attempts {
			return fmt.Errorf("%s: giving up after %d attempts: %w", op, attempt, err)
		}
		r.logger.Debug("retrying WAL operation", "op", op, "attempt", attempt, "backoff", wait, "error", err)
		appendRetriesTotal.WithLabelValues(r.backend).Inc()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (last error: %v)", op, ctx.Err(), err)
		case <-stop:
			t.Stop()
			return fmt.Errorf("%s: %w while retrying (last error: %v)", op, ErrClosed, err)
		}
		wait = min(2*wait, r.max)
	}
}

// errorReason labels an append error for metrics.
func errorReason(err error) string {
	switch {
	case errors.Is(err, ErrFenced):
		return "fenced"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "context"
	case errors.Is(err, ErrTruncated):
		return "truncated"
	default:
		return "other"
	}
}
