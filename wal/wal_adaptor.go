package wal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/consumerd/consumerd/internal/retry"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// walAdaptor is the WAL callers get: a backend WAL plus ordering, retries,
// availability, scanners with filters and handlers, and metrics. The
// append pipeline is in pipeline.go (hand-off and in-order delivery) and
// settle.go (recovery from a transient failure); scanners in scanner.go.
type walAdaptor struct {
	impl    walimpls.WALImpls
	async   walimpls.AsyncAppender
	backend string
	channel string
	term    uint64
	opts    adaptorOptions
	logger  hclog.Logger

	mu       sync.Mutex
	closed   bool
	scanners map[*scanner]struct{}
	inflight sync.WaitGroup // appends accepted and not yet completed

	fenced atomic.Pointer[error] // error later appends fail with once fenced

	// dedupePrefix and dedupeSeq name the fenced appends that come without a
	// DedupeID, so a retry of one whose reply was lost is not stored twice.
	dedupePrefix string
	dedupeSeq    atomic.Uint64

	pipe pipeline

	closing   chan struct{} // closed when Close starts: cuts retry waits short
	available chan struct{}
	availOnce sync.Once
	closeOnce sync.Once
	onClose   func() // set by the opener before the WAL is handed out
	m         walMetrics
}

// walMetrics are the WAL's metric children, looked up once.
type walMetrics struct {
	appends, bytes, retries prometheus.Counter
	duration                prometheus.Observer
}

// newWALMetrics looks up backend's children, and creates its
// consumerd_wal_append_errors_total series of every reason at 0: a counter
// series that first appears at 1 is invisible to increase() and rate(), so
// a backend's first error would not show on a dashboard or in an alert.
func newWALMetrics(backend string) walMetrics {
	for _, reason := range appendErrorReasons {
		appendErrorsTotal.WithLabelValues(backend, reason)
	}
	return walMetrics{
		appends:  appendsTotal.WithLabelValues(backend),
		bytes:    appendBytesTotal.WithLabelValues(backend),
		retries:  appendRetriesTotal.WithLabelValues(backend),
		duration: appendDuration.WithLabelValues(backend),
	}
}

// syncAppender lets a backend without walimpls.AsyncAppender take the one
// pipelined path: each append completes during its hand-off.
type syncAppender struct{ impl walimpls.WALImpls }

func (s syncAppender) AppendAsync(ctx context.Context, msg message.MutableMessage, cb func(message.MessageID, error)) {
	cb(s.impl.Append(ctx, msg))
}

func newWAL(impl walimpls.WALImpls, backend string, term uint64, opts adaptorOptions) *walAdaptor {
	w := &walAdaptor{
		impl:      impl,
		backend:   backend,
		channel:   impl.Channel(),
		term:      term,
		opts:      opts,
		logger:    opts.logger.With("backend", backend, "channel", impl.Channel()),
		scanners:  make(map[*scanner]struct{}),
		closing:   make(chan struct{}),
		available: make(chan struct{}),
		m:         newWALMetrics(backend),
	}
	if a, ok := impl.(walimpls.AsyncAppender); ok {
		w.async = a
	} else {
		w.async = syncAppender{impl}
	}
	if term > 0 {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
		w.dedupePrefix = "cw" + hex.EncodeToString(b[:]) + "-"
	}
	w.pipe.init(opts.asyncWindow)
	return w
}

func (w *walAdaptor) WALName() string { return w.backend }
func (w *walAdaptor) Channel() string { return w.channel }

func (w *walAdaptor) Available() <-chan struct{} { return w.available }

func (w *walAdaptor) IsAvailable() bool {
	select {
	case <-w.available:
		return false
	default:
		return true
	}
}

func (w *walAdaptor) markUnavailable() {
	w.availOnce.Do(func() { close(w.available) })
}

// fencedErr returns the error later appends fail with once fenced, or nil.
func (w *walAdaptor) fencedErr() error {
	if p := w.fenced.Load(); p != nil {
		return *p
	}
	return nil
}

func (w *walAdaptor) setFenced(err error) {
	fe := fmt.Errorf("wal: %q (term %d) is fenced: %w", w.channel, w.term, ErrFenced)
	if w.fenced.CompareAndSwap(nil, &fe) {
		w.logger.Warn("WAL fenced by a higher term; no more appends", "term", w.term, "error", err)
	}
	w.markUnavailable()
}

// do runs a backend operation with the WAL's retry policy: transient errors
// (walimpls.IsRetryable) are retried with backoff until the policy, ctx or
// Close ends it (then the error wraps ErrClosed).
func (w *walAdaptor) do(ctx context.Context, op string, fn func() error) error {
	return w.doWith(ctx, w.opts.retry, op, fn)
}

// doWith is do with policy instead of the WAL's.
func (w *walAdaptor) doWith(ctx context.Context, policy retry.Policy, op string, fn func() error) error {
	err := policy.Do(ctx, retry.Call{
		Stop:      w.closing,
		Retryable: walimpls.IsRetryable,
		OnRetry: func(attempt int, wait time.Duration, err error) {
			w.m.retries.Inc()
			w.logger.Debug("retrying WAL operation", "op", op, "attempt", attempt, "backoff", wait, "error", err)
		},
	}, fn)
	if errors.Is(err, retry.ErrStopped) {
		return fmt.Errorf("%s: %w: %w", op, ErrClosed, err)
	}
	return err
}

// appendErrorReasons are the values errorReason returns.
var appendErrorReasons = []string{"fenced", "closed", "context", "truncated", "other"}

// errorReason labels an append error for metrics: one of appendErrorReasons.
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

// beginOp refuses operations on a closed WAL.
func (w *walAdaptor) beginOp(op string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return fmt.Errorf("wal: %s %q: %w", op, w.channel, ErrClosed)
	}
	return nil
}

func (w *walAdaptor) LastID(ctx context.Context) (message.MessageID, error) {
	if err := w.beginOp("last id of"); err != nil {
		return 0, err
	}
	var id message.MessageID
	err := w.do(ctx, "last id of "+w.channel, func() error {
		var err error
		id, err = w.impl.LastID(ctx)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("wal: last id of %q: %w", w.channel, err)
	}
	return id, nil
}

func (w *walAdaptor) Bounds(ctx context.Context) (Bounds, error) {
	if err := w.beginOp("bounds of"); err != nil {
		return Bounds{}, err
	}
	var b Bounds
	err := w.do(ctx, "bounds of "+w.channel, func() error {
		var err error
		b, err = w.impl.Bounds(ctx)
		return err
	})
	if err != nil {
		return Bounds{}, fmt.Errorf("wal: bounds of %q: %w", w.channel, err)
	}
	return b, nil
}

func (w *walAdaptor) Truncate(ctx context.Context, id message.MessageID) error {
	if err := w.beginOp("truncate"); err != nil {
		return err
	}
	err := w.do(ctx, "truncate "+w.channel, func() error {
		return w.impl.Truncate(ctx, id)
	})
	if err != nil {
		return fmt.Errorf("wal: truncate %q before %d: %w", w.channel, id, err)
	}
	return nil
}

// Close stops accepting appends, waits for accepted ones (retry waits are cut
// short with ErrClosed), closes scanners, then the backend WAL.
func (w *walAdaptor) Close() {
	w.closeOnce.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		w.pipe.close()
		close(w.closing)
		w.markUnavailable()
		w.inflight.Wait()
		w.pipe.recovering.Wait()

		w.mu.Lock()
		ss := make([]*scanner, 0, len(w.scanners))
		for s := range w.scanners {
			ss = append(ss, s)
		}
		w.mu.Unlock()
		for _, s := range ss {
			s.stop(stopWALClosed)
		}
		w.impl.Close()
		if w.onClose != nil {
			w.onClose()
		}
		w.logger.Debug("WAL closed")
	})
}

// Count implements Counter.
func (w *walAdaptor) Count(ctx context.Context) (uint64, error) {
	c, ok := w.impl.(walimpls.Counter)
	if !ok {
		return 0, fmt.Errorf("wal: count %q: the %s backend does not count messages: %w", w.channel, w.backend, errors.ErrUnsupported)
	}
	if err := w.beginOp("count"); err != nil {
		return 0, err
	}
	var n uint64
	err := w.do(ctx, "count "+w.channel, func() error {
		var err error
		n, err = c.Count(ctx)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("wal: count %q: %w", w.channel, err)
	}
	return n, nil
}
