package wal

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// stopReason says who stopped a scanner.
type stopReason int

const (
	stopNone stopReason = iota
	stopClosed
	stopWALClosed
)

// scanner wraps a backend scanner: one goroutine feeds the backend's messages
// through the filters into the MessageHandler (by default a
// ChanMessageHandler behind Chan).
type scanner struct {
	w        *walAdaptor
	name     string
	impl     walimpls.ScannerImpls
	filters  []MessageFilter
	handler  MessageHandler
	out      ChanMessageHandler // Chan; nil with a caller's handler
	ctx      context.Context
	cancel   context.CancelFunc
	parent   context.Context
	done     chan struct{}
	mu       sync.Mutex
	reason   stopReason
	err      error
	stopOnce sync.Once
	// Per-backend counters, resolved once (WithLabelValues hashes the labels
	// on every call, which shows on the per-message path).
	delivered prometheus.Counter
	filtered  prometheus.Counter
}

// Read opens a scanner. The scanner runs until Close, until ctx ends (Error
// then wraps ctx.Err()), until the WAL closes (ErrClosed) or the backend
// scanner fails (its error, e.g. wrapping ErrTruncated).
func (w *walAdaptor) Read(ctx context.Context, opts ReadOption) (Scanner, error) {
	if err := w.beginOp("read"); err != nil {
		return nil, err
	}
	ro := walimpls.ReadOption{Name: opts.Name, DeliverPolicy: opts.DeliverPolicy, Verify: opts.Verify, Incarnation: opts.Incarnation}
	if opts.Verify {
		inc, err := w.verifyStart(ctx, opts.DeliverPolicy, opts.Incarnation)
		if err != nil {
			return nil, fmt.Errorf("wal: read %q from %+v: %w", w.channel, opts.DeliverPolicy, err)
		}
		ro.Incarnation = inc
	}
	var impl walimpls.ScannerImpls
	err := w.do(ctx, "read "+w.channel, func() error {
		var err error
		impl, err = w.impl.Read(ctx, ro)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("wal: read %q from %+v: %w", w.channel, opts.DeliverPolicy, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &scanner{
		w: w, name: opts.Name, impl: impl, filters: opts.MessageFilter,
		handler: opts.MesasgeHandler, ctx: sctx, cancel: cancel, parent: ctx, done: make(chan struct{}),
		delivered: scannerMessagesTotal.WithLabelValues(w.backend),
		filtered:  scannerFilteredTotal.WithLabelValues(w.backend),
	}
	if s.handler == nil {
		s.out = make(ChanMessageHandler, 128)
		s.handler = &chanHandler{out: s.out}
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		cancel()
		impl.Close()
		return nil, fmt.Errorf("wal: read %q: %w", w.channel, ErrClosed)
	}
	w.scanners[s] = struct{}{}
	w.mu.Unlock()
	go s.run()
	return s, nil
}

// verifyStart checks that the channel holds the position a verifying
// scanner starts after (DeliverStartAfter(id): id; DeliverStartFrom(id):
// id-1) in incarnation inc, and returns the incarnation the scanner then
// verifies against (the channel's own when inc is ""). DeliverAll and
// DeliverLatest start at what the channel holds: only the incarnation is
// checked.
func (w *walAdaptor) verifyStart(ctx context.Context, dp DeliverPolicy, inc string) (string, error) {
	var b Bounds
	err := w.do(ctx, "bounds of "+w.channel, func() error {
		var err error
		b, err = w.impl.Bounds(ctx)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("checking the start position: %w", err)
	}
	if inc == "" {
		inc = b.Incarnation
	}
	var after message.MessageID
	switch dp.Kind {
	case walimpls.DeliverKindStartAfter:
		after = dp.ID
	case walimpls.DeliverKindStartFrom:
		after = max(dp.ID, 1) - 1
	case walimpls.DeliverKindLatest:
		after = b.Last
	default:
		after = max(b.First, 1) - 1
	}
	return inc, walimpls.CheckPosition(w.channel, after, inc, b)
}

func (s *scanner) Channel() string { return s.w.channel }

// Chan delivers messages; nil when a MessageHandler was given.
func (s *scanner) Chan() <-chan message.ImmutableMessage {
	if s.out == nil {
		return nil
	}
	return s.out
}

func (s *scanner) Done() <-chan struct{} { return s.done }

func (s *scanner) Error() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close stops the scanner and waits for it; Error then reports
// ErrScannerClosed unless the scanner had already stopped for another reason.
func (s *scanner) Close() error {
	s.stop(stopClosed)
	return nil
}

func (s *scanner) stop(r stopReason) {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.reason = r
		s.mu.Unlock()
		s.cancel()
	})
	<-s.done
}

func (s *scanner) keep(m *message.ImmutableMessage) bool {
	for _, f := range s.filters {
		if !f(m) {
			return false
		}
	}
	return true
}

func (s *scanner) run() {
	err := s.loop()
	s.impl.Close()
	s.handler.Close()
	s.mu.Lock()
	switch s.reason {
	case stopClosed:
		err = walimpls.ErrScannerClosed
	case stopWALClosed:
		err = fmt.Errorf("wal: scanner %q on %q: %w", s.name, s.w.channel, ErrClosed)
	default:
		if errors.Is(err, ErrUpstreamClosed) {
			if ierr := s.impl.Error(); ierr != nil {
				err = ierr
				if walimpls.IsRetryable(ierr) {
					err = fmt.Errorf("%w: %w", ErrTransient, ierr)
				}
			}
		}
		if s.parent.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
			err = fmt.Errorf("wal: scanner %q on %q: %w", s.name, s.w.channel, s.parent.Err())
		}
	}
	s.err = err
	s.mu.Unlock()
	s.w.mu.Lock()
	delete(s.w.scanners, s)
	s.w.mu.Unlock()
	s.cancel()
	close(s.done)
}

// loop drives the handler until it reports an error: every message, Chan
// delivery included, goes through MessageHandler.Handle. The message held
// between taking it and delivering it lives in the scanner (no heap copy per
// message), and a handler may return Incoming pointing into its own storage.
func (s *scanner) loop() error {
	var held message.ImmutableMessage
	holding := false
	for {
		p := HandleParam{Ctx: s.ctx}
		if holding {
			p.Message = &held
		} else {
			p.Upstream = s.impl.Chan()
		}
		res := s.handler.Handle(p)
		if res.MessageHandled && holding {
			s.delivered.Inc()
			holding = false
			held = message.ImmutableMessage{}
		}
		if res.Incoming != nil {
			if holding {
				return fmt.Errorf("wal: scanner %q on %q: handler took a message from Upstream while still holding one", s.name, s.w.channel)
			}
			held = *res.Incoming
			if s.keep(&held) {
				holding = true
			} else {
				s.filtered.Inc()
				held = message.ImmutableMessage{}
			}
		}
		if res.Error != nil {
			return res.Error
		}
	}
}

// ChanMessageHandler is the default MessageHandler: it forwards every message
// to the channel, which Close closes. A scanner read without a handler
// delivers through one of these (its Chan).
type ChanMessageHandler chan message.ImmutableMessage

// Handle waits for whichever comes first: ctx ending (Error ctx.Err()),
// Upstream yielding a message (Incoming) or closing (ErrUpstreamClosed), or
// the held Message being sent on the channel (MessageHandled).
func (h ChanMessageHandler) Handle(p HandleParam) HandleResult {
	return handleChan(p, h, new(message.ImmutableMessage))
}

// Close closes the channel.
func (h ChanMessageHandler) Close() { close(h) }

// chanHandler is the ChanMessageHandler a scanner uses for its own Chan,
// with a buffer for Incoming so that a step costs no allocation.
type chanHandler struct {
	out ChanMessageHandler
	buf message.ImmutableMessage
}

func (h *chanHandler) Handle(p HandleParam) HandleResult { return handleChan(p, h.out, &h.buf) }
func (h *chanHandler) Close()                            { h.out.Close() }

// handleChan is one step of a channel handler; a message taken from
// Upstream is returned in *buf.
func handleChan(p HandleParam, out chan<- message.ImmutableMessage, buf *message.ImmutableMessage) HandleResult {
	var send chan<- message.ImmutableMessage
	var m message.ImmutableMessage
	if p.Message != nil {
		send, m = out, *p.Message
	}
	select {
	case <-p.Ctx.Done():
		return HandleResult{Error: p.Ctx.Err()}
	case msg, ok := <-p.Upstream:
		if !ok {
			return HandleResult{Error: ErrUpstreamClosed}
		}
		*buf = msg
		return HandleResult{Incoming: buf}
	case send <- m:
		return HandleResult{MessageHandled: true}
	}
}
