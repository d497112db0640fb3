package wal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// asyncItem is one append travelling through the dispatcher.
type asyncItem struct {
	ctx   context.Context
	msg   message.MutableMessage
	cb    func(*AppendResult, error)
	start time.Time

	// Pipelined mode. slot: the item holds a window slot. dispatched: handed
	// to the backend (set under pmu before the backend call). done, id, err:
	// the outcome, written and read by the dispatcher goroutine only.
	slot       bool
	dispatched bool
	done       bool
	id         message.MessageID
	err        error
}

// walAdaptor is the WAL callers get: a backend WAL plus ordering, retries,
// availability, scanners with filters and handlers, and metrics.
//
// Every append (Append and AppendAsync) goes through one dispatcher goroutine
// in call order, so appends from one goroutine are stored in call order. When
// the backend implements walimpls.AsyncAppender the dispatcher pipelines up to
// asyncWindow appends; otherwise it appends one message at a time.
type walAdaptor struct {
	impl    walimpls.WALImpls
	async   walimpls.AsyncAppender
	backend string
	channel string
	term    uint64
	opts    adaptorOptions
	logger  hclog.Logger
	retry   retrier

	mu       sync.Mutex
	closed   bool
	fenced   error
	scanners map[*scanner]struct{}
	inflight sync.WaitGroup // appends accepted and not yet completed

	queue   chan *asyncItem // serial mode
	results chan asyncResult

	// Pipelined mode: callers hand appends to the backend themselves, under
	// pmu, so pitems (in flight, call order) matches the backend's order.
	pmu      sync.Mutex
	pitems   []*asyncItem
	held     []*asyncItem // accepted while draining; sent after recovery
	draining bool
	slots    chan struct{} // window semaphore: in flight + held <= asyncWindow

	closing        chan struct{} // closed when Close starts: cuts retry waits short
	stopDispatch   chan struct{}
	dispatcherDone chan struct{}
	available      chan struct{}
	availOnce      sync.Once
	closeOnce      sync.Once
	onClose        func() // set by the opener before the WAL is handed out
	m              walMetrics
}

// walMetrics are the WAL's metric children, looked up once.
type walMetrics struct {
	appends, bytes, retries prometheus.Counter
	duration                prometheus.Observer
}

func newWALMetrics(backend string) walMetrics {
	return walMetrics{
		appends:  appendsTotal.WithLabelValues(backend),
		bytes:    appendBytesTotal.WithLabelValues(backend),
		retries:  appendRetriesTotal.WithLabelValues(backend),
		duration: appendDuration.WithLabelValues(backend),
	}
}

type asyncResult struct {
	it  *asyncItem
	id  message.MessageID
	err error
}

func newWAL(impl walimpls.WALImpls, backend string, term uint64, opts adaptorOptions) *walAdaptor {
	w := &walAdaptor{
		impl:           impl,
		backend:        backend,
		channel:        impl.Channel(),
		term:           term,
		opts:           opts,
		logger:         opts.logger.With("backend", backend, "channel", impl.Channel()),
		scanners:       make(map[*scanner]struct{}),
		queue:          make(chan *asyncItem, opts.asyncQueue),
		closing:        make(chan struct{}),
		stopDispatch:   make(chan struct{}),
		dispatcherDone: make(chan struct{}),
		available:      make(chan struct{}),
		m:              newWALMetrics(backend),
	}
	w.retry = retrier{initial: opts.retryInitial, max: opts.retryMax, attempts: opts.retryAttempts,
		logger: w.logger, backend: backend}
	if a, ok := impl.(walimpls.AsyncAppender); ok {
		w.async = a
		w.results = make(chan asyncResult, opts.asyncWindow)
		w.slots = make(chan struct{}, opts.asyncWindow)
		go w.runPipelined()
	} else {
		go w.runSerial()
	}
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
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fenced
}

func (w *walAdaptor) setFenced(err error) {
	w.mu.Lock()
	first := w.fenced == nil
	if first {
		w.fenced = fmt.Errorf("wal: %q (term %d) is fenced: %w", w.channel, w.term, ErrFenced)
	}
	w.mu.Unlock()
	if first {
		w.logger.Warn("WAL fenced by a higher term; no more appends", "term", w.term, "error", err)
	}
	w.markUnavailable()
}

// beginAppend accepts an append unless the WAL is closed or fenced.
func (w *walAdaptor) beginAppend() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return fmt.Errorf("wal: append to %q: %w", w.channel, ErrClosed)
	}
	if w.fenced != nil {
		return w.fenced
	}
	w.inflight.Add(1)
	return nil
}

// Append stores msg through the dispatcher and waits for the outcome or ctx.
func (w *walAdaptor) Append(ctx context.Context, msg message.MutableMessage) (*AppendResult, error) {
	type outcome struct {
		res *AppendResult
		err error
	}
	ch := make(chan outcome, 1)
	w.AppendAsync(ctx, msg, func(r *AppendResult, err error) { ch <- outcome{r, err} })
	select {
	case o := <-ch:
		return o.res, o.err
	case <-ctx.Done():
		// The dispatcher sees the same ctx and completes the item on its own;
		// the message may or may not be stored.
		return nil, fmt.Errorf("wal: append to %q: %w", w.channel, ctx.Err())
	}
}

// AppendAsync accepts msg and returns; cb is called exactly once, in call
// order, from the dispatcher goroutine (or at once on the caller's goroutine
// when the append is refused before it was accepted).
func (w *walAdaptor) AppendAsync(ctx context.Context, msg message.MutableMessage, cb func(*AppendResult, error)) {
	start := time.Now()
	if cb == nil {
		cb = func(*AppendResult, error) {}
	}
	if err := w.beginAppend(); err != nil {
		w.observe(start, &msg, err)
		cb(nil, err)
		return
	}
	it := &asyncItem{ctx: ctx, msg: msg, cb: cb, start: start}
	if w.async == nil {
		select {
		case w.queue <- it:
		case <-ctx.Done():
			w.complete(it, 0, fmt.Errorf("wal: append to %q: queued: %w", w.channel, ctx.Err()))
		}
		return
	}
	select {
	case w.slots <- struct{}{}:
		it.slot = true
	case <-ctx.Done():
		w.complete(it, 0, fmt.Errorf("wal: append to %q: waiting for the async window: %w", w.channel, ctx.Err()))
		return
	}
	w.pmu.Lock()
	defer w.pmu.Unlock()
	if w.draining {
		w.held = append(w.held, it)
		return
	}
	w.sendLocked(it)
}

// sendLocked hands it to the backend (or fails it early) and appends it to
// pitems. Every item sent produces exactly one asyncResult. Called with pmu
// held, so pitems order is the order of the backend calls.
func (w *walAdaptor) sendLocked(it *asyncItem) {
	w.pitems = append(w.pitems, it)
	if err := w.precheck(it); err != nil {
		// results has room: one slot per item, one result per item.
		w.results <- asyncResult{it: it, err: err}
		return
	}
	it.dispatched = true
	w.async.AppendAsync(it.ctx, it.msg, func(id message.MessageID, err error) {
		w.results <- asyncResult{it: it, id: id, err: err}
	})
}

// observe records metrics (and fencing) for a finished append.
func (w *walAdaptor) observe(start time.Time, msg *message.MutableMessage, err error) {
	w.m.duration.Observe(time.Since(start).Seconds())
	if err != nil {
		appendErrorsTotal.WithLabelValues(w.backend, errorReason(err)).Inc()
		if errors.Is(err, ErrFenced) {
			w.setFenced(err)
		}
		return
	}
	w.m.appends.Inc()
	w.m.bytes.Add(float64(msg.Size()))
}

// complete finishes an accepted append.
func (w *walAdaptor) complete(it *asyncItem, id message.MessageID, err error) {
	w.observe(it.start, &it.msg, err)
	if it.slot {
		it.slot = false
		<-w.slots // before cb: a cb may append again
	}
	if err != nil {
		it.cb(nil, err)
	} else {
		it.cb(&AppendResult{MessageID: id}, nil)
	}
	w.inflight.Done()
}

// appendWithRetry appends one message synchronously at the backend.
func (w *walAdaptor) appendWithRetry(it *asyncItem) (message.MessageID, error) {
	var id message.MessageID
	err := w.retry.do(it.ctx, w.closing, "append to "+w.channel, func() error {
		if err := w.fencedErr(); err != nil {
			return err
		}
		var err error
		id, err = w.impl.Append(it.ctx, it.msg)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("wal: append to %q: %w", w.channel, err)
	}
	return id, nil
}

// precheck fails an item before it reaches the backend when its context has
// ended or the WAL is fenced.
func (w *walAdaptor) precheck(it *asyncItem) error {
	if err := it.ctx.Err(); err != nil {
		return fmt.Errorf("wal: append to %q: %w", w.channel, err)
	}
	return w.fencedErr()
}

// runSerial appends queued items one at a time, in order.
func (w *walAdaptor) runSerial() {
	defer close(w.dispatcherDone)
	for {
		select {
		case it := <-w.queue:
			if err := w.precheck(it); err != nil {
				w.complete(it, 0, err)
				continue
			}
			id, err := w.appendWithRetry(it)
			w.complete(it, id, err)
		case <-w.stopDispatch:
			return
		}
	}
}

// runPipelined collects the outcomes of appends that callers handed to the
// backend (up to asyncWindow in flight) and reports them in call order. A
// transient failure at the head stops sending (new appends are held) until
// everything in flight has finished; then failed items after the last stored
// one are retried one at a time, in order, while failed items before a stored
// one are reported (retrying them would store them out of order); then the
// held appends are sent.
func (w *walAdaptor) runPipelined() {
	defer close(w.dispatcherDone)
	var ready []*asyncItem
	for {
		select {
		case r := <-w.results:
			r.it.done, r.it.id, r.it.err = true, r.id, r.err
		case <-w.stopDispatch:
			return
		}
		// Collect what else has finished, to settle it in one pass.
	more:
		for {
			select {
			case r := <-w.results:
				r.it.done, r.it.id, r.it.err = true, r.id, r.err
			default:
				break more
			}
		}
		// Take finished items off the head, in order.
		ready = ready[:0]
		var settle []*asyncItem
		w.pmu.Lock()
		for !w.draining && len(w.pitems) > 0 && w.pitems[0].done {
			it := w.pitems[0]
			if it.err != nil && walimpls.IsRetryable(it.err) {
				w.draining = true
				break
			}
			w.pitems[0] = nil
			w.pitems = w.pitems[1:]
			ready = append(ready, it)
		}
		if w.draining && allDone(w.pitems) {
			settle, w.pitems = w.pitems, nil
		}
		w.pmu.Unlock()
		for _, it := range ready {
			w.finishPipelined(it)
		}
		if settle != nil {
			w.settleDrained(settle)
			w.pmu.Lock()
			held := w.held
			w.held = nil
			w.draining = false
			for _, it := range held {
				w.sendLocked(it)
			}
			w.pmu.Unlock()
		}
	}
}

func allDone(items []*asyncItem) bool {
	for _, it := range items {
		if !it.done {
			return false
		}
	}
	return true
}

func (w *walAdaptor) finishPipelined(it *asyncItem) {
	if it.err != nil {
		w.complete(it, 0, fmt.Errorf("wal: append to %q: %w", w.channel, it.err))
		return
	}
	w.complete(it, it.id, nil)
}

// settleDrained settles a drained window that holds a transient failure.
func (w *walAdaptor) settleDrained(items []*asyncItem) {
	outs := make([]settleOutcome, len(items))
	for i, it := range items {
		outs[i] = settleOutcome{dispatched: it.dispatched, err: it.err}
	}
	for i, action := range planSettle(outs) {
		it := items[i]
		switch action {
		case settleReport:
			w.finishPipelined(it)
		case settleDrop:
			w.complete(it, 0, fmt.Errorf("wal: append to %q: not retried because a later append was already stored: %w",
				w.channel, it.err))
		case settleRetry:
			w.m.retries.Inc()
			w.logger.Debug("retrying failed pipelined append", "error", it.err)
			if err := w.precheck(it); err != nil {
				w.complete(it, 0, err)
				continue
			}
			id, err := w.appendWithRetry(it)
			w.complete(it, id, err)
		}
	}
}

// settleAction is what happens to one append of a drained pipelined window.
type settleAction int

const (
	// settleReport reports the outcome as it is (stored, or a final error).
	settleReport settleAction = iota
	// settleDrop reports the transient error without retrying: a later
	// append was stored, so a retry would store this one out of order.
	settleDrop
	// settleRetry retries the append (in order, one at a time).
	settleRetry
)

func (a settleAction) String() string {
	switch a {
	case settleReport:
		return "report"
	case settleDrop:
		return "drop"
	case settleRetry:
		return "retry"
	default:
		return fmt.Sprintf("settleAction(%d)", int(a))
	}
}

// settleOutcome is the outcome of one append of a drained window.
type settleOutcome struct {
	dispatched bool // handed to the backend
	err        error
}

// planSettle decides, for a drained window in call order, which appends are
// reported, dropped or retried: transient failures after the last stored
// append are retried; those before it are dropped; everything else is
// reported. Pure: no I/O.
func planSettle(outs []settleOutcome) []settleAction {
	lastStored := -1
	for i, o := range outs {
		if o.dispatched && o.err == nil {
			lastStored = i
		}
	}
	plan := make([]settleAction, len(outs))
	for i, o := range outs {
		switch {
		case o.err == nil || !walimpls.IsRetryable(o.err):
			plan[i] = settleReport
		case i < lastStored:
			plan[i] = settleDrop
		default:
			plan[i] = settleRetry
		}
	}
	return plan
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
	err := w.retry.do(ctx, w.closing, "last id of "+w.channel, func() error {
		var err error
		id, err = w.impl.LastID(ctx)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("wal: last id of %q: %w", w.channel, err)
	}
	return id, nil
}

func (w *walAdaptor) Truncate(ctx context.Context, id message.MessageID) error {
	if err := w.beginOp("truncate"); err != nil {
		return err
	}
	err := w.retry.do(ctx, w.closing, "truncate "+w.channel, func() error {
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
		close(w.closing)
		w.markUnavailable()
		w.inflight.Wait()
		close(w.stopDispatch)
		<-w.dispatcherDone

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
