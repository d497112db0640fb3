package wal

import (
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/consumerd/consumerd/internal/retry"
)

// Defaults used by NewOpenerBuilder when no Option overrides them.
// DefaultAsyncWindow is large enough that a WAL is not limited by ack latency
// (3072 in flight at 5 ms is 600k msg/s) and below the JetStream backend's
// default MaxPending (4000), so one WAL does not hit its stall path.
const (
	DefaultRetryInitial  = 10 * time.Millisecond
	DefaultRetryMax      = time.Second
	DefaultRetryAttempts = 10
	DefaultAsyncWindow   = 3072
)

// adaptorOptions are the adaptor's settings.
type adaptorOptions struct {
	logger      hclog.Logger
	retry       retry.Policy
	asyncWindow int
}

func defaultOptions() adaptorOptions {
	return adaptorOptions{
		logger:      hclog.NewNullLogger(),
		retry:       retry.Policy{Initial: DefaultRetryInitial, Max: DefaultRetryMax, Attempts: DefaultRetryAttempts},
		asyncWindow: DefaultAsyncWindow,
	}
}

// Option configures the adaptor built by NewOpenerBuilder.
type Option func(*adaptorOptions)

// WithLogger sets the adaptor's logger (default: discard). WALs log with the
// fields "backend" and "channel".
func WithLogger(l hclog.Logger) Option {
	return func(o *adaptorOptions) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithRetry sets the backoff of retried backend operations (see package
// internal/retry: each wait is drawn from [d/2, d], d doubling from initial
// up to max); attempts bounds the total number of tries (first try
// included). attempts <= 0 retries until the context ends or the WAL closes;
// attempts == 1 never retries. Non-positive durations keep the defaults.
func WithRetry(initial, max time.Duration, attempts int) Option {
	return func(o *adaptorOptions) {
		if initial > 0 {
			o.retry.Initial = initial
		}
		if max > 0 {
			o.retry.Max = max
		}
		o.retry.Attempts = attempts
	}
}

// WithAsyncWindow bounds the appends in flight at the backend at once (a
// caller that finds the window full waits until it has drained to three
// quarters). n <= 0 keeps the default.
func WithAsyncWindow(n int) Option {
	return func(o *adaptorOptions) {
		if n > 0 {
			o.asyncWindow = n
		}
	}
}
