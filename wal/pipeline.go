package wal

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// The append pipeline: callers hand appends to the backend themselves, under
// pipeline.smu, so the order of items in the ring (in flight, call order) is
// the order the backend got them. The backend reports each outcome as it
// arrives, in any order, from any goroutine; outcomes are delivered in ring
// order by whichever goroutine holds the delivering role (the backend's
// reply goroutine that completed the head, the caller whose append
// completed during its own hand-off, or a recovery goroutine). No goroutine
// sits between the backend's reply and the caller's callback. A failure at
// the head (a transient one; on a fenced WAL any) switches to draining: new
// appends are held, the window drains, and a recovery goroutine settles it
// (settle.go) — never the backend's reply goroutine, which the retries' own
// replies need.

// asyncItem is one accepted append.
type asyncItem struct {
	w     *walAdaptor
	ctx   context.Context
	msg   message.MutableMessage
	cb    func(*AppendResult, error)
	start time.Time // zero when the latency of this append is not sampled
	size  int       // the caller's message size (before an assigned DedupeID), for metrics
	res   AppendResult

	// slot: the item counts in the async window (until it leaves the ring,
	// or its recovery reports it). dispatched: handed to the backend. done,
	// id, err: the outcome, guarded by pipeline.cmu. handoff: 0 while the
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

// pipeline is a WAL's append window.
type pipeline struct {
	// smu orders hand-offs to the backend; it is never held while a
	// callback runs. cmu guards the fields after it; it is never held while
	// calling the backend or a callback.
	smu        sync.Mutex
	cmu        sync.Mutex
	ring       []*asyncItem // in flight, call order: ring[rhead], ... (rlen items)
	rhead      int
	rlen       int
	undone     int          // items in ring without an outcome yet
	held       []*asyncItem // accepted while draining; sent after recovery
	draining   bool
	delivering bool          // a goroutine is delivering outcomes
	closed     bool          // Close has started (also under smu)
	used       int           // window slots taken: in flight + held + recovering
	room       chan struct{} // closed when used falls to lowWater; nil if no one waits
	window     int
	lowWater   int            // waiters wake when used <= lowWater (hysteresis)
	sampled    uint32         // appends sent, for latency sampling (under smu)
	recovering sync.WaitGroup // recovery goroutines
}

func (p *pipeline) init(window int) {
	p.ring = make([]*asyncItem, window)
	p.window = window
	p.lowWater = window - max(1, window/4)
}

// close refuses appends from now on (under both locks: an append checks
// under both, which also orders its inflight.Add before Close's Wait).
func (p *pipeline) close() {
	p.smu.Lock()
	p.cmu.Lock()
	p.closed = true
	p.cmu.Unlock()
	p.smu.Unlock()
}

// busyLocked reports whether earlier appends are still to be reported.
// Called with cmu held.
func (p *pipeline) busyLocked() bool {
	return p.rlen > 0 || p.draining || len(p.held) > 0 || p.delivering
}

// pop takes the head of the ring.
func (p *pipeline) pop() *asyncItem {
	it := p.ring[p.rhead]
	p.ring[p.rhead] = nil
	p.rhead = (p.rhead + 1) % len(p.ring)
	p.rlen--
	return it
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

// latencySample: appends observe their latency one in latencySample (the
// histogram's count then is about appends/latencySample); appends refused at
// once always do.
const latencySample = 8

// AppendAsync accepts msg and returns; cb is called exactly once, see WAL.
func (w *walAdaptor) AppendAsync(ctx context.Context, msg message.MutableMessage, cb func(*AppendResult, error)) {
	if cb == nil {
		cb = func(*AppendResult, error) {}
	}
	size := msg.Size()
	if w.term > 0 && msg.DedupeID == "" {
		msg.DedupeID = w.dedupePrefix + strconv.FormatUint(w.dedupeSeq.Add(1), 36)
	}
	p := &w.pipe
	p.smu.Lock()
	p.cmu.Lock()
	var err error
	switch {
	case p.closed:
		err = fmt.Errorf("wal: append to %q: %w", w.channel, ErrClosed)
	case !p.busyLocked():
		// Refused at once only when nothing earlier is still to be
		// reported; otherwise the refusal goes through the pipeline
		// (sendLocked's precheck), so callbacks stay in call order.
		err = w.fencedErr()
	}
	if err != nil {
		p.cmu.Unlock()
		p.smu.Unlock()
		w.refuse(size, cb, err)
		return
	}
	w.inflight.Add(1)
	it := &asyncItem{w: w, ctx: ctx, msg: msg, cb: cb, size: size}
	for p.used >= p.window {
		// The window is full: wait until it has drained to lowWater, so a
		// blocked caller is woken once per batch of acknowledgements, not
		// once per acknowledgement.
		if p.room == nil {
			p.room = make(chan struct{})
		}
		room := p.room
		p.cmu.Unlock()
		p.smu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			w.complete(it, 0, fmt.Errorf("wal: append to %q: waiting for the async window: %w", w.channel, ctx.Err()))
			return
		}
		p.smu.Lock()
		p.cmu.Lock()
	}
	p.used++
	it.slot = true
	if p.sampled++; p.sampled%latencySample == 1 {
		it.start = time.Now()
	}
	deliver := w.sendLocked(it)
	p.smu.Unlock()
	if deliver {
		w.kick()
	}
}

// refuse reports an append refused before it was accepted.
func (w *walAdaptor) refuse(size int, cb func(*AppendResult, error), err error) {
	w.observe(time.Now(), size, err)
	cb(nil, err)
}

// releaseLocked gives back it's window slot and wakes waiting callers once
// the window has drained to lowWater. Called with cmu held.
func (w *walAdaptor) releaseLocked(it *asyncItem) {
	p := &w.pipe
	if !it.slot {
		return
	}
	it.slot = false
	p.used--
	if p.room != nil && p.used <= p.lowWater {
		close(p.room)
		p.room = nil
	}
}

// sendLocked queues it in the ring and hands it to the backend, or holds it
// while draining, or fails it early (ctx ended, fenced). Called with smu and
// cmu held (it holds a window slot); it releases cmu. smu is held across the
// backend call, so ring order is the order of the backend calls. It reports
// whether the caller must deliver outcomes (kick) once it has released smu:
// the item was completed during the hand-off, when no one else would
// deliver it.
func (w *walAdaptor) sendLocked(it *asyncItem) bool {
	p := &w.pipe
	if p.draining {
		p.held = append(p.held, it)
		p.cmu.Unlock()
		return false
	}
	p.ring[(p.rhead+p.rlen)%len(p.ring)] = it
	p.rlen++
	if err := w.precheck(it); err != nil {
		it.done, it.err = true, err
		if w.term > 0 {
			// Nothing after it may reach the backend before it settles,
			// or what is stored would have a gap.
			p.draining = true
		}
		p.cmu.Unlock()
		return true
	}
	p.undone++
	it.dispatched = true
	it.handoff.Store(0)
	p.cmu.Unlock()
	w.async.AppendAsync(it.ctx, it.msg, it.backendDone)
	return !it.handoff.CompareAndSwap(0, 1)
}

// precheck fails an item before it reaches the backend when its context has
// ended or the WAL is fenced.
func (w *walAdaptor) precheck(it *asyncItem) error {
	if err := it.ctx.Err(); err != nil {
		return fmt.Errorf("wal: append to %q: %w", w.channel, err)
	}
	return w.fencedErr()
}

// onResult records a backend outcome and, unless another goroutine is
// delivering or the item's caller is still inside the backend call, delivers
// what is ready. It runs on the backend's reply goroutine (or the caller's)
// and never blocks on anything but the callbacks it delivers.
func (w *walAdaptor) onResult(it *asyncItem, id message.MessageID, err error) {
	p := &w.pipe
	p.cmu.Lock()
	it.done, it.id, it.err = true, id, err
	p.undone--
	if p.delivering || it.handoff.CompareAndSwap(0, 2) {
		p.cmu.Unlock()
		return
	}
	p.delivering = true
	w.deliverLocked()
}

// kick delivers what is ready unless another goroutine is delivering.
func (w *walAdaptor) kick() {
	p := &w.pipe
	p.cmu.Lock()
	if p.delivering {
		p.cmu.Unlock()
		return
	}
	p.delivering = true
	w.deliverLocked()
}

// deliverBatch bounds the outcomes taken off the ring per lock round.
const deliverBatch = 16

// needsSettling reports whether an outcome at the head must go through
// recovery rather than straight to its callback: a transient failure (to be
// retried), or on a fenced WAL any failure (the appends behind it must then
// fail too, so that what is stored stays a prefix of the calls).
func (w *walAdaptor) needsSettling(it *asyncItem) bool {
	if it.err == nil {
		return false
	}
	return w.term > 0 || walimpls.IsRetryable(it.err)
}

// deliverLocked is called with cmu held by the goroutine that set
// delivering; it returns with cmu released and the role given up (or
// handed to a recovery goroutine). It reports finished items off the head
// of the ring in order. A failure needing settlement at the head switches to
// draining; once nothing is in flight the window goes to a recovery
// goroutine. Every goroutine that records an outcome while another delivers
// leaves it to that one, which looks again before giving the role up, so no
// outcome is left behind.
func (w *walAdaptor) deliverLocked() {
	p := &w.pipe
	var buf [deliverBatch]*asyncItem
	for {
		n := 0
		for n < len(buf) && p.rlen > 0 {
			it := p.ring[p.rhead]
			if !it.done {
				break
			}
			if w.needsSettling(it) {
				p.draining = true
				break
			}
			p.pop()
			w.releaseLocked(it) // before cb: a cb may append again
			buf[n] = it
			n++
		}
		if n == 0 {
			if p.draining && p.undone == 0 {
				items := make([]*asyncItem, p.rlen)
				for i := range items {
					items[i] = p.pop()
				}
				p.recovering.Add(1)
				p.cmu.Unlock()
				go w.recover(items) // keeps the delivering role
				return
			}
			p.delivering = false
			p.cmu.Unlock()
			return
		}
		p.cmu.Unlock()
		w.finishBatch(buf[:n])
		clear(buf[:n])
		p.cmu.Lock()
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
			bytes += it.size
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

// outcomeErr is the error an item's callback gets: the backend's error
// wrapped with the channel (an error set before the hand-off already is).
func (w *walAdaptor) outcomeErr(it *asyncItem) error {
	if it.err == nil || !it.dispatched {
		return it.err
	}
	return fmt.Errorf("wal: append to %q: %w", w.channel, it.err)
}

// observe records metrics (and fencing) for a finished append of size bytes.
func (w *walAdaptor) observe(start time.Time, size int, err error) {
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
	w.m.bytes.Add(float64(size))
}

// complete finishes an accepted append.
func (w *walAdaptor) complete(it *asyncItem, id message.MessageID, err error) {
	w.observe(it.start, it.size, err)
	if it.slot {
		w.pipe.cmu.Lock()
		w.releaseLocked(it) // before cb: a cb may append again
		w.pipe.cmu.Unlock()
	}
	if err != nil {
		it.cb(nil, err)
	} else {
		it.cb(&AppendResult{MessageID: id}, nil)
	}
	w.inflight.Done()
}
