package wal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// asyncItem is one accepted append.
type asyncItem struct {
	w     *walAdaptor
	ctx   context.Context
	msg   message.MutableMessage
	cb    func(*AppendResult, error)
	start time.Time // zero when the latency of this append is not sampled
	res   AppendResult

	// Pipelined mode. slot: the item counts in the async window (until it
	// leaves the ring, or its recovery reports it). dispatched: handed to
	// the backend.
	// done, id, err: the outcome, guarded by w.cmu. handoff: 0 while the
	// caller is inside the backend's AppendAsync, 1 after; 2 when the
	// backend reported the outcome before that call returned (the caller
	// then delivers, so no callback runs under smu).
	slot       bool
	dispatched bool
	done       bool
	id         message.MessageID
	err        error
	handoff    atomic.Int32
}

// backendDone is the callback given to the backend's AppendAsync.
func (it *asyncItem) backendDone(id message.MessageID, err error) { it.w.onResult(it, id, err) }

// walAdaptor is the WAL callers get: a backend WAL plus ordering, retries,
// availability, scanners with filters and handlers, and metrics.
//
// Pipelined mode (the backend implements walimpls.AsyncAppender): callers
// hand appends to the backend themselves, under smu, so the order of items
// in the ring (in flight, call order) is the backend's order. Outcomes are
// delivered in ring order by whichever goroutine holds the delivering role
// (a backend callback, the caller whose append completed during its own
// hand-off, or a recovery goroutine): no dispatcher goroutine sits between
// the backend's acknowledgement and the caller's callback. A transient
// failure at the head switches to draining: new appends are held, the
// window drains, and a recovery goroutine (never the backend's callback
// goroutine, which the retry's own acknowledgement needs) settles it.
//
// Serial mode (any other backend): one dispatcher goroutine appends queued
// items one at a time, in order.
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
	scanners map[*scanner]struct{}
	inflight sync.WaitGroup // appends accepted and not yet completed

	fenced atomic.Pointer[error] // error later appends fail with once fenced

	queue chan *asyncItem // serial mode

	// Pipelined mode. smu orders hand-offs to the backend; it is never held
	// while a callback runs. cmu guards the fields after it; it is never
	// held while calling the backend or a callback.
	smu        sync.Mutex
	cmu        sync.Mutex
	ring       []*asyncItem // in flight, call order: ring[rhead], ... (rlen items)
	rhead      int
	rlen       int
	undone     int          // items in ring without an outcome yet
	held       []*asyncItem // accepted while draining; sent after recovery
	draining   bool
	delivering bool           // a goroutine is delivering outcomes
	closedPipe bool           // Close has started (also under smu)
	used       int            // window slots taken: in flight + held + recovering
	room       chan struct{}  // closed when used falls to lowWater; nil if no one waits
	window     int            // asyncWindow
	sampled    uint32         // pipelined appends sent, for latency sampling (under smu)
	lowWater   int            // waiters wake when used <= lowWater (hysteresis)
	recovering sync.WaitGroup // recovery goroutines

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

func newWAL(impl walimpls.WALImpls, backend string, term uint64, opts adaptorOptions) *walAdaptor {
	w := &walAdaptor{
		impl:           impl,
		backend:        backend,
		channel:        impl.Channel(),
		term:           term,
		opts:           opts,
		logger:         opts.logger.With("backend", backend, "channel", impl.Channel()),
		scanners:       make(map[*scanner]struct{}),
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
		w.ring = make([]*asyncItem, opts.asyncWindow)
		w.window = opts.asyncWindow
		w.lowWater = w.window - max(1, w.window/4)
		close(w.dispatcherDone) // no dispatcher goroutine
	} else {
		w.queue = make(chan *asyncItem, opts.asyncQueue)
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

// beginAppend accepts an append unless the WAL is closed or fenced.
func (w *walAdaptor) beginAppend() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return fmt.Errorf("wal: append to %q: %w", w.channel, ErrClosed)
	}
	if err := w.fencedErr(); err != nil {
		return err
	}
	w.inflight.Add(1)
	return nil
}

// Append stores msg through AppendAsync and waits for the outcome or ctx.
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
		// The WAL sees the same ctx and completes the item on its own; the
		// message may or may not be stored.
		return nil, fmt.Errorf("wal: append to %q: %w", w.channel, ctx.Err())
	}
}

// latencySample: pipelined appends observe their latency one in
// latencySample (the histogram's count then is about appends/latencySample);
// serial appends and appends refused at once always do.
const latencySample = 8

// AppendAsync accepts msg and returns; cb is called exactly once, see WAL.
func (w *walAdaptor) AppendAsync(ctx context.Context, msg message.MutableMessage, cb func(*AppendResult, error)) {
	if cb == nil {
		cb = func(*AppendResult, error) {}
	}
	if w.async != nil {
		w.appendPipelined(ctx, msg, cb)
		return
	}
	if err := w.beginAppend(); err != nil {
		w.refuse(&msg, cb, err)
		return
	}
	it := &asyncItem{w: w, ctx: ctx, msg: msg, cb: cb, start: time.Now()}
	select {
	case w.queue <- it:
	case <-ctx.Done():
		w.complete(it, 0, fmt.Errorf("wal: append to %q: queued: %w", w.channel, ctx.Err()))
	}
}

// refuse reports an append refused before it was accepted.
func (w *walAdaptor) refuse(msg *message.MutableMessage, cb func(*AppendResult, error), err error) {
	w.observe(time.Now(), msg, err)
	cb(nil, err)
}

// appendPipelined is AppendAsync on a pipelined WAL. The WAL's closed and
// fenced state is checked under smu and cmu (Close sets closedPipe under
// both), which also orders the inflight.Add before Close's inflight.Wait.
func (w *walAdaptor) appendPipelined(ctx context.Context, msg message.MutableMessage, cb func(*AppendResult, error)) {
	w.smu.Lock()
	w.cmu.Lock()
	err := w.fencedErr()
	if w.closedPipe {
		err = fmt.Errorf("wal: append to %q: %w", w.channel, ErrClosed)
	}
	if err != nil {
		w.cmu.Unlock()
		w.smu.Unlock()
		w.refuse(&msg, cb, err)
		return
	}
	w.inflight.Add(1)
	it := &asyncItem{w: w, ctx: ctx, msg: msg, cb: cb}
	for w.used >= w.window {
		// The window is full: wait until it has drained to lowWater, so a
		// blocked caller is woken once per batch of acknowledgements, not
		// once per acknowledgement.
		if w.room == nil {
			w.room = make(chan struct{})
		}
		room := w.room
		w.cmu.Unlock()
		w.smu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			w.complete(it, 0, fmt.Errorf("wal: append to %q: waiting for the async window: %w", w.channel, ctx.Err()))
			return
		}
		w.smu.Lock()
		w.cmu.Lock()
	}
	w.used++
	it.slot = true
	if w.sampled++; w.sampled%latencySample == 1 {
		it.start = time.Now()
	}
	deliver := w.sendLocked(it)
	w.smu.Unlock()
	if deliver {
		w.kick()
	}
}

// releaseLocked gives back it's window slot and wakes waiting callers once
// the window has drained to lowWater. Called with cmu held.
func (w *walAdaptor) releaseLocked(it *asyncItem) {
	if !it.slot {
		return
	}
	it.slot = false
	w.used--
	if w.room != nil && w.used <= w.lowWater {
		close(w.room)
		w.room = nil
	}
}

// sendLocked queues it in the ring and hands it to the backend, or holds it
// while draining, or fails it early (ctx ended, fenced). Called with smu and
// cmu held (it holds a window slot); it releases cmu. smu is held across the
// backend call, so ring order is the order of the backend calls. It reports whether
// the caller must deliver outcomes (kick) once it has released smu: the item
// was completed during the hand-off, when no one else would deliver it.
func (w *walAdaptor) sendLocked(it *asyncItem) bool {
	if w.draining {
		w.held = append(w.held, it)
		w.cmu.Unlock()
		return false
	}
	w.ring[(w.rhead+w.rlen)%len(w.ring)] = it
	w.rlen++
	err := it.ctx.Err()
	if err != nil {
		err = fmt.Errorf("wal: append to %q: %w", w.channel, err)
	} else {
		err = w.fencedErr()
	}
	if err != nil {
		it.done, it.err = true, err
		w.cmu.Unlock()
		return true
	}
	w.undone++
	it.dispatched = true
	it.handoff.Store(0)
	w.cmu.Unlock()
	w.async.AppendAsync(it.ctx, it.msg, it.backendDone)
	return !it.handoff.CompareAndSwap(0, 1)
}

// onResult records a backend outcome and, unless another goroutine is
// delivering or the item's caller is still inside the backend call, delivers
// what is ready. It runs on the backend's callback goroutine (or the
// caller's) and never blocks on anything but the callbacks it delivers.
func (w *walAdaptor) onResult(it *asyncItem, id message.MessageID, err error) {
	w.cmu.Lock()
	it.done, it.id, it.err = true, id, err
	w.undone--
	if w.delivering || it.handoff.CompareAndSwap(0, 2) {
		w.cmu.Unlock()
		return
	}
	w.delivering = true
	w.deliverLocked()
}

// kick delivers what is ready unless another goroutine is delivering.
func (w *walAdaptor) kick() {
	w.cmu.Lock()
	if w.delivering {
		w.cmu.Unlock()
		return
	}
	w.delivering = true
	w.deliverLocked()
}

// deliverBatch bounds the outcomes taken off the ring per lock round.
const deliverBatch = 16

// deliverLocked is called with cmu held by the goroutine that set
// delivering; it returns with cmu released and the role given up (or
// handed to a recovery goroutine). It reports finished items off the head
// of the ring in order. A transient failure at the head switches to
// draining; once nothing is in flight the window goes to a recovery
// goroutine. Every goroutine that records an outcome while another delivers
// leaves it to that one, which looks again before giving the role up, so no
// outcome is left behind.
func (w *walAdaptor) deliverLocked() {
	var buf [deliverBatch]*asyncItem
	for {
		n := 0
		for n < len(buf) && w.rlen > 0 {
			it := w.ring[w.rhead]
			if !it.done {
				break
			}
			if it.err != nil && walimpls.IsRetryable(it.err) {
				w.draining = true
				break
			}
			w.ring[w.rhead] = nil
			w.rhead = (w.rhead + 1) % len(w.ring)
			w.rlen--
			w.releaseLocked(it) // before cb: a cb may append again
			buf[n] = it
			n++
		}
		if n == 0 {
			if w.draining && w.undone == 0 {
				items := make([]*asyncItem, w.rlen)
				for i := range items {
					items[i] = w.ring[w.rhead]
					w.ring[w.rhead] = nil
					w.rhead = (w.rhead + 1) % len(w.ring)
				}
				w.rlen = 0
				w.recovering.Add(1)
				w.cmu.Unlock()
				go w.recover(items) // keeps the delivering role
				return
			}
			w.delivering = false
			w.cmu.Unlock()
			return
		}
		w.cmu.Unlock()
		w.finishBatch(buf[:n])
		clear(buf[:n])
		w.cmu.Lock()
	}
}

// finishBatch reports items in order: metrics first (one update per batch
// for the counters), then callbacks.
func (w *walAdaptor) finishBatch(items []*asyncItem) {
	var now time.Time
	var ok, bytes int
	for _, it := range items {
		if it.err == nil {
			if !it.start.IsZero() {
				if now.IsZero() {
					now = time.Now()
				}
				w.m.duration.Observe(now.Sub(it.start).Seconds())
			}
			ok++
			bytes += it.msg.Size()
		}
	}
	if ok > 0 {
		w.m.appends.Add(float64(ok))
		w.m.bytes.Add(float64(bytes))
	}
	for _, it := range items {
		if it.err != nil {
			w.complete(it, 0, w.outcomeErr(it))
			continue
		}
		it.res.MessageID = it.id
		it.cb(&it.res, nil)
		w.inflight.Done()
	}
}

// recover settles a drained window that holds a transient failure, then
// sends the appends held meanwhile, then delivers again. It runs on its own
// goroutine (owned by the WAL: Close waits for it) holding the delivering
// role, since retrying waits for acknowledgements that the backend's
// callback goroutine must stay free to deliver.
func (w *walAdaptor) recover(items []*asyncItem) {
	defer w.recovering.Done()
	w.settleDrained(items)
	w.smu.Lock()
	w.cmu.Lock()
	held := w.held
	w.held = nil
	w.draining = false
	w.cmu.Unlock()
	for _, it := range held {
		w.cmu.Lock()
		w.sendLocked(it) // this goroutine delivers below
	}
	w.smu.Unlock()
	w.cmu.Lock()
	w.deliverLocked()
}

// outcomeErr is the error an item's callback gets: the backend's error
// wrapped with the channel (an error set before the hand-off already is).
func (w *walAdaptor) outcomeErr(it *asyncItem) error {
	if it.err == nil || !it.dispatched {
		return it.err
	}
	return fmt.Errorf("wal: append to %q: %w", w.channel, it.err)
}

// observe records metrics (and fencing) for a finished append.
func (w *walAdaptor) observe(start time.Time, msg *message.MutableMessage, err error) {
	if !start.IsZero() {
		w.m.duration.Observe(time.Since(start).Seconds())
	}
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
		w.cmu.Lock()
		w.releaseLocked(it) // before cb: a cb may append again
		w.cmu.Unlock()
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
			w.complete(it, it.id, w.outcomeErr(it))
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
		w.smu.Lock()
		w.cmu.Lock()
		w.closedPipe = true
		w.cmu.Unlock()
		w.smu.Unlock()
		close(w.closing)
		w.markUnavailable()
		w.inflight.Wait()
		w.recovering.Wait()
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
