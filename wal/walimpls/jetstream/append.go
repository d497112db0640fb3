package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// The append pipeline.
//
// Term-0 appends are published on core NATS and settled by the opener's own
// reply subscription (fastappend.go), which calls the caller's callback
// directly. A fenced writer's appends (term > 0) are published with
// PublishMsgAsync and settled by the connection's ack handlers
// (opener.onAck / opener.onErr), which find the append by its *nats.Msg. No
// goroutine waits per append:
//
//   - term > 0: the handler records the outcome on the append, and the WAL's
//     run goroutine reports outcomes in call order and, when an append was
//     rejected because the stream moved, resynchronises (resync).

// pending is one append on its way.
type pending struct {
	w     *walImpl
	m     *nats.Msg
	cb    func(message.MessageID, error)
	msgID string // fenced writers: Nats-Msg-Id, stable across re-sends
	tries int    // fenced writers: conflict re-sends so far; term 0: no-responders re-sends (guarded by its fast shard's lock)
	epoch uint64 // the opener's watchdog epoch when last published; guarded by its shard's lock
	tok   uint64 // term 0: reply token (see fastappend.go)
	fired atomic.Bool

	mu      sync.Mutex // guards the outcome; never held while calling NATS
	settled bool
	id      message.MessageID
	err     error
}

func (p *pending) outcome() (settled bool, id message.MessageID, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.settled, p.id, p.err
}

func (p *pending) setOutcome(id message.MessageID, err error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.settled {
		return false
	}
	p.settled, p.id, p.err = true, id, err
	return true
}

func (p *pending) reset() {
	p.mu.Lock()
	p.settled, p.id, p.err = false, 0, nil
	p.mu.Unlock()
}

// track registers p before its message is published, so the ack handler
// finds it however fast the ack comes back.
func (o *opener) track(p *pending) {
	sh := o.shard(p.m)
	sh.mu.Lock()
	p.epoch = o.epoch.Load()
	sh.m[p.m] = p
	sh.mu.Unlock()
}

func (o *opener) take(m *nats.Msg) *pending {
	sh := o.shard(m)
	sh.mu.Lock()
	p := sh.m[m]
	delete(sh.m, m)
	sh.mu.Unlock()
	return p
}

// pendShards spreads the pending map over independently locked shards, so
// the publishing goroutines and the ack goroutine rarely meet on one lock.
const pendShards = 16

type pendShard struct {
	mu sync.Mutex
	m  map[*nats.Msg]*pending
	_  [40]byte // keep shards on separate cache lines
}

func (o *opener) shard(m *nats.Msg) *pendShard {
	// Messages are heap objects of 100+ bytes: drop the low bits.
	return &o.pend[(uintptr(unsafe.Pointer(m))>>7)%pendShards]
}

// onAck is the connection's PublishAsync ack handler. It runs on the
// ack-processing goroutine and never blocks.
func (o *opener) onAck(_ jetstream.JetStream, m *nats.Msg, ack *jetstream.PubAck) {
	if p := o.take(m); p != nil {
		p.w.settle(p, message.MessageID(ack.Sequence), nil)
	}
}

// onErr is the connection's PublishAsync error handler (rejections,
// disconnects, and the watchdog's CleanupPublisher). nats.go calls it
// without holding its publisher lock.
func (o *opener) onErr(_ jetstream.JetStream, m *nats.Msg, err error) {
	p := o.take(m)
	if p == nil {
		return
	}
	if errors.Is(err, jetstream.ErrJetStreamPublisherClosed) {
		err = fmt.Errorf("jetstream: append to channel %q on %s: no acknowledgement within the ack timeout (%v) for this or another append of the connection: %w",
			p.w.n.channel, o.cfg.URL, o.cfg.AckTimeout, err)
	} else {
		err = fmt.Errorf("jetstream: append to channel %q on %s: %w", p.w.n.channel, o.cfg.URL, err)
	}
	p.w.settle(p, 0, err)
}

// watchTicks is how many watchdog ticks make one AckTimeout.
const watchTicks = 4

// epochRing is how many epochs' start times the watchdog remembers; an
// append older than that is stale whatever the times.
const epochRing = 64

// watch is the opener's watchdog (one goroutine, stopped by Close). It bounds
// the wait for acknowledgements, which nats.go would otherwise do with one
// timer per append: every AckTimeout/watchTicks it advances the epoch (appends
// record it when published, with no clock read per append) and, if an append
// has been waiting for its acknowledgement for at least AckTimeout (it was
// published before the start of an epoch that began AckTimeout ago; so it
// fails between 1 and about 1.25 AckTimeout after it was sent), it calls
// CleanupPublisher. That fails every async publish of the connection still
// waiting (through onErr, with ErrJetStreamPublisherClosed, a retryable
// error: the adaptor retries them) and leaves the JetStream context usable —
// a lost acknowledgement, e.g. after a cluster leader change without a
// reconnect, never stalls the connection. Acknowledgements of the failed
// publishes that still arrive are ignored. CleanupPublisher is safe beside
// concurrent publishes (nats.go serialises them on its publisher lock and
// recreates the reply subscription on the next publish); a publish racing
// with it may lose its acknowledgement, and then the next round fails it.
// Term-0 appends (fastappend.go) are in the opener's own table: the watchdog
// fails just the stale ones, with the same retryable error.
func (o *opener) watch() {
	defer close(o.watchDone)
	t := time.NewTicker(max(o.cfg.AckTimeout/watchTicks, time.Millisecond))
	defer t.Stop()
	var began [epochRing]time.Time // began[e%epochRing]: epoch e had begun by then
	for {
		select {
		case <-o.stopWatch:
			return
		case <-t.C:
		}
		now := o.epoch.Add(1)
		began[now%epochRing] = time.Now() // read after the increment: never before the epoch began
		if n := o.failFast(func(p *pending) bool { return o.isStale(p.epoch, now, &began) }, o.ackTimeoutErr); n > 0 {
			o.log.Warn("term-0 appends unacknowledged after the ack timeout; failing them so they are retried",
				"url", o.cfg.URL, "ack_timeout", o.cfg.AckTimeout, "stale", n)
		}
		if n := o.stale(now, &began); n > 0 {
			o.log.Warn("appends unacknowledged after the ack timeout; failing every pending append of the connection so they are retried",
				"url", o.cfg.URL, "ack_timeout", o.cfg.AckTimeout, "stale", n, "pending", o.js.PublishAsyncPending())
			o.js.CleanupPublisher()
		}
	}
}

// stale counts the appends that have waited at least AckTimeout at the start
// of epoch now: those published in an epoch e whose successor e+1 began
// AckTimeout ago or earlier.
func (o *opener) stale(now uint64, began *[epochRing]time.Time) int {
	n := 0
	for i := range o.pend {
		sh := &o.pend[i]
		sh.mu.Lock()
		for _, p := range sh.m {
			if o.isStale(p.epoch, now, began) {
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// isStale reports whether an append published in epoch e has waited at least
// AckTimeout at the start of epoch now.
func (o *opener) isStale(e, now uint64, began *[epochRing]time.Time) bool {
	next := e + 1
	switch {
	case next > now:
		return false // published in the current epoch
	case now-next >= epochRing-1:
		return true
	default:
		return began[now%epochRing].Sub(began[next%epochRing]) >= o.cfg.AckTimeout
	}
}

// failPending settles every append of w still waiting for an ack with err.
func (o *opener) failPending(w *walImpl, err error) {
	o.failFast(func(p *pending) bool { return p.w == w }, func(*pending) error { return err })
	var ps []*pending
	for i := range o.pend {
		sh := &o.pend[i]
		sh.mu.Lock()
		for m, p := range sh.m {
			if p.w == w {
				ps = append(ps, p)
				delete(sh.m, m)
			}
		}
		sh.mu.Unlock()
	}
	for _, p := range ps {
		w.settle(p, 0, err)
	}
}

// settle records p's outcome: a term-0 append is reported at once; a fenced
// writer's is left for run, in call order.
func (w *walImpl) settle(p *pending, id message.MessageID, err error) {
	if w.term == 0 {
		w.finish(p, id, err)
		return
	}
	if p.setOutcome(id, err) {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// finish calls p's callback exactly once.
func (w *walImpl) finish(p *pending, id message.MessageID, err error) {
	if !p.fired.CompareAndSwap(false, true) {
		return
	}
	p.cb(id, err)
	if w.term == 0 {
		w.inflight.Done()
	}
}

// Append stores msg and waits for the acknowledgement.
func (w *walImpl) Append(ctx context.Context, msg message.MutableMessage) (message.MessageID, error) {
	type result struct {
		id  message.MessageID
		err error
	}
	ch := make(chan result, 1)
	w.AppendAsync(ctx, msg, func(id message.MessageID, err error) { ch <- result{id, err} })
	select {
	case r := <-ch:
		return r.id, r.err
	case <-ctx.Done():
		return 0, fmt.Errorf("jetstream: append to channel %q: %w (the message may have been stored)", w.n.channel, ctx.Err())
	}
}

// AppendAsync publishes msg and calls cb with its id once acknowledged (see
// walimpls.AsyncAppender; cb runs on the connection's ack goroutine, or on
// the caller's for an immediate failure). Term-0 appends are unconditional;
// a fenced writer's are chained (see the package doc) so that they pipeline.
func (w *walImpl) AppendAsync(ctx context.Context, msg message.MutableMessage, cb func(message.MessageID, error)) {
	if err := ctx.Err(); err != nil {
		cb(0, fmt.Errorf("jetstream: append to channel %q: %w", w.n.channel, err))
		return
	}
	p := &pending{w: w, m: encodeMessage(w.n.data, &msg), cb: cb}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		cb(0, fmt.Errorf("jetstream: append to channel %q: %w", w.n.channel, walimpls.ErrClosed))
		return
	}
	if w.fencedErr != nil {
		err := w.fencedErr
		w.mu.Unlock()
		cb(0, err)
		return
	}
	if w.term == 0 {
		w.inflight.Add(1)
		w.mu.Unlock()
		if err := w.publishFast(ctx, p); err != nil {
			w.finish(p, 0, err)
		}
		return
	}
	if w.resyncing {
		w.held = append(w.held, p)
		w.mu.Unlock()
		return
	}
	w.sendLocked(ctx, p)
	w.mu.Unlock()
}

// checkSize fails a message the server would refuse for its size.
func (w *walImpl) checkSize(m *nats.Msg) error {
	max := w.o.maxPayload.Load()
	if max <= 0 {
		return nil
	}
	if total, hdr := wireSize(m); int64(total) > max {
		return walimpls.Permanent(fmt.Errorf(
			"jetstream: append to channel %q: message of %d bytes (payload %d + headers %d) exceeds the NATS server's max_payload of %d bytes",
			w.n.channel, total, len(m.Data), hdr, max))
	}
	return nil
}

// publish sends p's message asynchronously. On an error nothing was sent
// and the ack handlers will not see p.
func (w *walImpl) publish(ctx context.Context, p *pending) error {
	if err := w.checkSize(p.m); err != nil {
		return err
	}
	w.o.track(p)
	for {
		_, err := w.o.js.PublishMsgAsync(p.m)
		if err == nil {
			return nil
		}
		if errors.Is(err, jetstream.ErrTooManyStalledMsgs) && ctx.Err() == nil && !w.killed() {
			continue // backpressure: MaxPending acknowledgements outstanding
		}
		w.o.take(p.m)
		if errors.Is(err, nats.ErrMaxPayload) {
			err = walimpls.Permanent(err)
		}
		return fmt.Errorf("jetstream: append to channel %q on %s: %w", w.n.channel, w.o.cfg.URL, err)
	}
}

// sendLocked chains p onto the fenced writer's appends, publishes it, and
// queues it. Called with w.mu held, so queue order is wire order.
func (w *walImpl) sendLocked(ctx context.Context, p *pending) {
	if p.msgID == "" {
		p.msgID = p.m.Header.Get(jetstream.MsgIDHeader) // the caller's DedupeID
		if p.msgID == "" {
			w.idSeq++
			p.msgID = w.idPrefix + strconv.FormatUint(w.idSeq, 36)
		}
	}
	setChain(p.m, p.msgID, w.chain, w.expected)
	p.reset()
	if err := w.publish(ctx, p); err != nil {
		p.setOutcome(0, err)
	} else {
		w.chain = p.msgID
	}
	w.queue = append(w.queue, p)
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *walImpl) killed() bool {
	select {
	case <-w.kill:
		return true
	default:
		return false
	}
}

// run reports a fenced writer's outcomes in call order until Close drains
// the queue.
func (w *walImpl) run() {
	defer close(w.loopDone)
	for {
		p := w.nextSettled()
		if p == nil {
			return
		}
		_, id, err := p.outcome()
		if err != nil && isWrongLastSeq(err) {
			w.resync(p)
			continue
		}
		w.finish(p, id, err)
	}
}

// nextSettled pops the oldest queued append once it is settled. It returns
// nil when the WAL is closed and the queue empty. After kill, an unsettled
// head is failed with ErrClosed.
func (w *walImpl) nextSettled() *pending {
	closing := w.closing // noticed once per call; then only wake and kill matter
	for {
		w.mu.Lock()
		if len(w.queue) == 0 && w.closed {
			w.mu.Unlock()
			return nil
		}
		if len(w.queue) > 0 {
			h := w.queue[0]
			if settled, _, _ := h.outcome(); settled {
				w.queue[0] = nil
				w.queue = w.queue[1:]
				w.mu.Unlock()
				return h
			}
		}
		w.mu.Unlock()
		select {
		case <-w.wake:
		case <-closing:
			closing = nil
		case <-w.kill:
			w.failQueued()
		}
	}
}

func (w *walImpl) failQueued() {
	w.mu.Lock()
	q := append([]*pending(nil), w.queue...)
	w.mu.Unlock()
	for _, p := range q {
		p.setOutcome(0, fmt.Errorf("jetstream: append to channel %q: no acknowledgement before close: %w", w.n.channel, walimpls.ErrClosed))
	}
}

// resync handles a fenced writer's append rejected because the stream moved
// (wrong last sequence or last Nats-Msg-Id): it holds new appends, collects
// the outcome of every append already sent, reads the last sequence and the
// fence term, and then either fails everything with ErrFenced (a higher term
// exists) or re-sends the rejected appends, then the held ones, in call
// order. Appends are chained, so once one is rejected every later one in
// flight is rejected too, and re-sending keeps call order.
func (w *walImpl) resync(first *pending) {
	w.mu.Lock()
	w.resyncing = true
	w.mu.Unlock()

	retry := []*pending{first}
	for {
		w.mu.Lock()
		empty := len(w.queue) == 0
		w.mu.Unlock()
		if empty {
			break
		}
		p := w.nextSettled()
		if p == nil {
			break
		}
		_, id, err := p.outcome()
		if err != nil && isWrongLastSeq(err) {
			retry = append(retry, p)
		} else {
			w.finish(p, id, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), w.o.cfg.AckTimeout)
	last, fterm, err := w.lastSeqAndFence(ctx)
	cancel()

	w.mu.Lock()
	all := append(retry, w.held...)
	w.held = nil
	w.resyncing = false
	var fail error
	switch {
	case w.killed():
		fail = fmt.Errorf("jetstream: append to channel %q: %w", w.n.channel, walimpls.ErrClosed)
	case err != nil:
		fail = fmt.Errorf("jetstream: append to channel %q: resynchronising after a conflicting append: %w", w.n.channel, err)
	case fterm > w.term:
		w.fencedErr = w.fenced(fterm)
		fail = w.fencedErr
		w.log.Info("fenced by a higher term", "current_term", fterm)
	default:
		w.log.Debug("another writer appended; re-sending", "last_seq", last, "resent", len(retry))
		w.expected = last
	}
	w.chain = ""
	for i, p := range all {
		switch {
		case fail != nil:
			p.reset()
			p.setOutcome(0, fail)
			w.queue = append(w.queue, p)
		case i < len(retry) && p.tries >= maxConflictRetries:
			p.reset()
			p.setOutcome(0, fmt.Errorf("jetstream: append to channel %q: rejected %d times because another writer with term %d or no term keeps appending",
				w.n.channel, p.tries+1, w.term))
			w.queue = append(w.queue, p)
		default:
			if i < len(retry) {
				p.tries++
			}
			w.sendLocked(context.Background(), p)
		}
	}
	w.mu.Unlock()
}
