package wal

import (
	"time"

	"github.com/hashicorp/go-hclog"
)

// Defaults used by NewOpenerBuilder when no Option overrides them.
// DefaultAsyncWindow is large enough that a pipelined WAL is not limited by
// ack latency (3072 in flight at 5 ms is 600k msg/s) and below the JetStream
// backend's default MaxPending (4000), so one WAL does not hit its stall path.
const (
	DefaultRetryInitial  = 10 * time.Millisecond
	DefaultRetryMax      = time.Second
	DefaultRetryAttempts = 10
	DefaultAsyncWindow   = 3072
	DefaultAsyncQueue    = 1024
)

// adaptorOptions are the adaptor's settings.
type adaptorOptions struct {
	logger        hclog.Logger
	retryInitial  time.Duration
	retryMax      time.Duration
	retryAttempts int
	asyncWindow   int
	asyncQueue    int
}

func defaultOptions() adaptorOptions {
	return adaptorOptions{
		logger:        hclog.NewNullLogger(),
		retryInitial:  DefaultRetryInitial,
		retryMax:      DefaultRetryMax,
		retryAttempts: DefaultRetryAttempts,
		asyncWindow:   DefaultAsyncWindow,
		asyncQueue:    DefaultAsyncQueue,
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

// WithRetry sets the backoff of retried backend operations: the first retry
// waits initial, each later one twice as long up to max; attempts bounds the
// total number of tries (first try included). attempts <= 0 retries until the
// context ends or the WAL closes; attempts == 1 never retries. Non-positive
// durations keep the defaults.
func WithRetry(initial, max time.Duration, attempts int) Option {
	return func(o *adaptorOptions) {
		if initial > 0 {
			o.retryInitial = initial
		}
		if max > 0 {
			o.retryMax = max
		}
		if o.retryMax < o.retryInitial {
			o.retryMax = o.retryInitial
		}
		o.retryAttempts = attempts
	}
}

// WithAsyncWindow bounds the async appends in flight at the backend at once
// when the backend pipelines (implements walimpls.AsyncAppender; a caller
// that finds the window full waits until it has drained to three quarters),
// and the AppendAsync calls queued ahead of the dispatcher otherwise. n <= 0
// keeps the default.
func WithAsyncWindow(n int) Option {
	return func(o *adaptorOptions) {
		if n > 0 {
			o.asyncWindow = n
			o.asyncQueue = n
		}
	}
}
