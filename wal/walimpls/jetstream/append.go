package jetstream

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// The append paths.
//
// Every append is published on core NATS and settled by the opener's own
// reply subscription (publish.go); a fenced writer's (term > 0, fenced.go)
// are chained first. The backend reports each outcome as it arrives, on
// whatever goroutine learned it (the reply handler, the watchdog, a
// disconnect handler, or the caller for an error before sending): it keeps no
// queue of its own, and the wal adaptor puts the outcomes back in call order.
// No goroutine waits per append; the watchdog (watchdog.go) bounds the wait
// for replies.

// pending is one append on its way.
type pending struct {
	w     *walImpl
	m     *nats.Msg
	cb    func(message.MessageID, error)
	epoch uint64 // the opener's watchdog epoch when published; guarded by its table shard's lock
	tok   uint64 // reply token (see publish.go)
	next  uint64 // on a sequence chain, the id the link must get (0: not a link of one)
	idem  bool   // unfenced with a DedupeID: never buffered while reconnecting (publish.go)
	fired atomic.Bool
}

// finish reports p's outcome exactly once: the first report wins (a reply
// that races the watchdog or a disconnect is ignored).
func (w *walImpl) finish(p *pending, id message.MessageID, err error) {
	if !p.fired.CompareAndSwap(false, true) {
		return
	}
	if w.term > 0 {
		// A link stored elsewhere than predicted (a re-send acknowledged as a
		// duplicate) leaves the links sent after it expecting too much.
		w.settledFenced(err != nil || (p.next != 0 && uint64(id) != p.next))
	}
	p.cb(id, err)
	w.inflight.Done()
}

// refuse reports a fenced append that was never counted in the chain's
// outcomes (see beginFenced).
func (w *walImpl) refuse(p *pending, err error) {
	p.fired.Store(true)
	p.cb(0, err)
	w.inflight.Done()
}

// Append stores msg and waits for the acknowledgement: AppendAsync and a
// wait, so both take one path.
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
// walimpls.AsyncAppender): unconditionally for term 0, chained for a fenced
// writer (see the package doc). cb runs on the goroutine that learns the
// outcome, or on the caller's for an error before sending.
func (w *walImpl) AppendAsync(ctx context.Context, msg message.MutableMessage, cb func(message.MessageID, error)) {
	if err := ctx.Err(); err != nil {
		w.failUnsent(cb, fmt.Errorf("jetstream: append to channel %q: %w", w.n.channel, err))
		return
	}
	w.mu.Lock()
	err := w.fencedErr
	if w.closed {
		err = fmt.Errorf("jetstream: append to channel %q: %w", w.n.channel, walimpls.ErrClosed)
	}
	if err == nil {
		w.inflight.Add(1)
	}
	w.mu.Unlock()
	if err != nil {
		w.failUnsent(cb, err)
		return
	}
	p := &pending{w: w, m: encodeMessage(w.n.data, &msg), cb: cb}
	if w.term == 0 {
		p.idem = msg.DedupeID != ""
		if err := w.publishFast(ctx, p); err != nil {
			w.finish(p, 0, err)
		}
		return
	}
	w.appendFenced(ctx, p, msg.DedupeID)
}

// failUnsent reports an append refused before it was counted in flight.
func (w *walImpl) failUnsent(cb func(message.MessageID, error), err error) {
	if w.term > 0 {
		w.breakChain()
	}
	cb(0, err)
}

// jsMaxHeaders is the largest header block JetStream stores.
const jsMaxHeaders = 64 << 10

// failPending reports err for every append of w still waiting for a reply.
func (o *opener) failPending(w *walImpl, err error) {
	o.failFast(func(p *pending) bool { return p.w == w }, func(*pending) error { return err })
}
