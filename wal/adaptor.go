package wal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/consumerd/consumerd/internal/retry"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// NewOpenerBuilder wraps a backend builder into the caller-facing
// OpenerBuilder: every WAL it opens gets async append, availability, retries
// with backoff, filters, handler delivery and metrics on top of the backend.
func NewOpenerBuilder(impls walimpls.OpenerBuilderImpls, opts ...Option) OpenerBuilder {
	o := defaultOptions()
	for _, fn := range opts {
		fn(&o)
	}
	return &openerBuilder{impls: impls, opts: o}
}

type openerBuilder struct {
	impls walimpls.OpenerBuilderImpls
	opts  adaptorOptions
}

func (b *openerBuilder) Name() string { return b.impls.Name() }

func (b *openerBuilder) Build() (Opener, error) {
	impl, err := b.impls.Build()
	if err != nil {
		return nil, fmt.Errorf("wal: build %s opener: %w", b.impls.Name(), err)
	}
	return &opener{impl: impl, backend: b.impls.Name(), opts: b.opts, closed: make(chan struct{}),
		wals: make(map[*walAdaptor]struct{})}, nil
}

// The optional interfaces every Opener of this package implements.
var (
	_ ChannelRemover     = (*opener)(nil)
	_ ServerInfoReporter = (*opener)(nil)
	_ ConnectionReporter = (*opener)(nil)
)

type opener struct {
	impl    walimpls.OpenerImpls
	backend string
	opts    adaptorOptions
	closed  chan struct{}
	once    sync.Once

	mu   sync.Mutex
	wals map[*walAdaptor]struct{} // open WALs, closed by Close if the caller did not
}

// Open opens a channel on the backend, retrying transient errors.
func (o *opener) Open(ctx context.Context, opt *OpenOption) (WAL, error) {
	if opt == nil {
		return nil, fmt.Errorf("wal: open on %s: nil OpenOption", o.backend)
	}
	if opt.Channel == "" {
		return nil, fmt.Errorf("wal: open on %s: empty channel name", o.backend)
	}
	var impl walimpls.WALImpls
	err := o.opts.retry.Do(ctx, retry.Call{
		Stop:      o.closed,
		Retryable: walimpls.IsRetryable,
		OnRetry: func(attempt int, wait time.Duration, err error) {
			appendRetriesTotal.WithLabelValues(o.backend).Inc()
			o.opts.logger.Debug("retrying WAL open", "channel", opt.Channel, "attempt", attempt, "backoff", wait, "error", err)
		},
	}, func() error {
		var err error
		impl, err = o.impl.Open(ctx, opt)
		return err
	})
	if errors.Is(err, retry.ErrStopped) {
		err = fmt.Errorf("%w: %w", ErrClosed, err)
	}
	if err != nil {
		return nil, fmt.Errorf("wal: open %q (term %d) on %s: %w", opt.Channel, opt.Term, o.backend, err)
	}
	w := newWAL(impl, o.backend, opt.Term, o.opts)
	w.onClose = func() {
		o.mu.Lock()
		delete(o.wals, w)
		o.mu.Unlock()
	}
	o.mu.Lock()
	select {
	case <-o.closed:
		o.mu.Unlock()
		w.Close()
		return nil, fmt.Errorf("wal: open %q on %s: opener: %w", opt.Channel, o.backend, ErrClosed)
	default:
	}
	o.wals[w] = struct{}{}
	o.mu.Unlock()
	return w, nil
}

// Close closes WALs still open from this opener (callers should close them
// first), then the backend connection. Safe to call more than once.
func (o *opener) Close() {
	o.once.Do(func() {
		o.mu.Lock()
		close(o.closed)
		wals := make([]*walAdaptor, 0, len(o.wals))
		for w := range o.wals {
			wals = append(wals, w)
		}
		o.mu.Unlock()
		for _, w := range wals {
			w.Close()
		}
		o.impl.Close()
	})
}

// RemoveChannel implements ChannelRemover.
func (o *opener) RemoveChannel(ctx context.Context, channel string) error {
	r, ok := o.impl.(walimpls.ChannelRemover)
	if !ok {
		return fmt.Errorf("wal: remove channel %q: the %s backend cannot remove channels: %w", channel, o.backend, errors.ErrUnsupported)
	}
	err := o.opts.retry.Do(ctx, retry.Call{Stop: o.closed, Retryable: walimpls.IsRetryable}, func() error {
		return r.RemoveChannel(ctx, channel)
	})
	if err != nil {
		return fmt.Errorf("wal: remove channel %q on %s: %w", channel, o.backend, err)
	}
	return nil
}

// ServerInfo implements ServerInfoReporter.
func (o *opener) ServerInfo() (version string, atomicBatches, ok bool) {
	si, ok := o.impl.(walimpls.ServerInfo)
	if !ok {
		return "", false, false
	}
	return si.ServerVersion(), si.AtomicBatches(), true
}

// Connection implements ConnectionReporter.
func (o *opener) Connection() (url string, connected, ok bool) {
	ci, ok := o.impl.(walimpls.ConnectionInfo)
	if !ok {
		return "", false, false
	}
	return ci.ConnectedURL(), ci.Connected(), true
}
