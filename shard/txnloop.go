package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
)

// recordPublishedEvery is how often, at most, a commit records the
// outputs already published (and deletes their outbox rows).
const recordPublishedEvery = time.Second

// pendingTxn is a transaction whose commit is in flight.
type pendingTxn struct {
	commit   *recoverylog.Commit
	out      *outTxn // its outputs, for the drainer once applied (nil: none)
	ov       *overlay
	offsets  map[string]message.MessageID
	opened   time.Time
	messages int
	slot     *commitSlot // its slot of the member's commit gate
}

// txnLoop is a primary's transaction loop: it does what its txnCore
// decides, waiting on the channels each decision names. Two transactions
// are in play at most: one consuming (open) and one committing (prev).
type txnLoop struct {
	r           *replica
	sh          *primaryShard
	consumer    Consumer
	rec         *recoverylog.Recorder
	pub         *txnPublisher
	drain       *drainer
	clock       clock     // the core's
	recorded    uint64    // the outbox-published the last commit recorded
	recordedAt  time.Time // when
	in          <-chan inbound
	stopped     <-chan *source     // a source's scanner stopped
	sources     map[string]*source // by channel
	lag         *lagTracker
	maxBytes    int
	maxMessages int

	core txnCore
	prev *pendingTxn
	gate *commitGate  // the member's
	load *primaryLoad // what the loop's work costs (loadreport.go)

	// metric children, resolved once
	mMessages, mBytes, mTxns prometheus.Counter

	offsets map[string]message.MessageID // the open transaction's source offsets
}

func (l *txnLoop) prevDone() <-chan struct{} {
	if l.prev == nil {
		return nil
	}
	return l.prev.commit.Done()
}

// finishPrev accounts for the completed commit of prev.
func (l *txnLoop) finishPrev() error {
	p := l.prev
	l.prev = nil
	p.slot.release()
	l.core.prevDone()
	// Apply writes the batch to the DB here, on the loop's goroutine, before
	// its overlay goes: Get never misses the transaction's writes.
	err := l.rec.Apply(p.commit)
	l.sh.inflight = l.sh.inflight[1:]
	if err != nil {
		return fmt.Errorf("commit transaction: %w", err)
	}
	if p.out != nil {
		if err := l.drain.enqueue(l.sh.ctx, p.out); err != nil {
			return err
		}
	}
	now := l.clock.Now()
	l.mTxns.Inc()
	metricTxnDuration.Observe(now.Sub(p.opened).Seconds())
	l.r.committed(int64(l.rec.Position().LogID), now)
	l.lag.commit(p.offsets)
	return nil
}

// pubErr is the error to stop with when the app's Consume or Flush failed
// with appErr: the publisher's own, when a Publish of it failed (the app
// may have wrapped it without %w, hiding a transient failure), else appErr.
func (l *txnLoop) pubErr(appErr error) error {
	if l.pub.err != nil {
		return fmt.Errorf("%w (the app's error: %v)", l.pub.err, appErr)
	}
	return appErr
}

func (l *txnLoop) consume(m inbound) error {
	defer l.load.busySince(time.Now())
	env := topic.Envelope{Partition: m.src.part, Message: m.msg}
	if err := safeCall("Consume", func() error { return l.consumer.Consume(l.sh, env, l.pub) }); err != nil {
		return fmt.Errorf("message %s@%d: %w", m.src.channel, m.msg.ID, l.pubErr(err))
	}
	n := m.msg.Size()
	l.offsets[m.src.channel] = m.msg.ID
	l.core.consumed(n)
	l.mMessages.Inc()
	l.mBytes.Add(float64(n))
	l.load.msgs.Add(1)
	l.load.bytes.Add(int64(n))
	return nil
}

// sourceStopped is the loop's error when src's scanner stopped: a lost
// channel names what this primary committed of it (sourcecheck.go).
func (l *txnLoop) sourceStopped(src *source) error {
	return asSourceLost(l.r.id, src, l.lag.committedOf(src.channel), src.stopErr())
}

// errDrainerStopped: the drainer stopped without an error while the loop's
// context is live (its context is the loop's: not expected).
var errDrainerStopped = errors.New("the output drainer stopped")

// run consumes and commits until ctx is done or an error.
func (l *txnLoop) run(ctx context.Context) error {
	l.mMessages = metricMessages.WithLabelValues(l.r.id)
	l.mBytes = metricBytes.WithLabelValues(l.r.id)
	l.mTxns = metricTransactions.WithLabelValues(l.r.id)
	defer l.core.stopTimers()
	defer func() {
		if l.prev != nil {
			l.prev.slot.release()
		}
	}()
	for {
		var err error
		switch l.core.next() {
		case txnIdle:
			err = l.idle(ctx)
		case txnConsume:
			select {
			case m := <-l.in:
				err = l.consume(m)
			default:
				l.core.stall()
			}
		case txnWait:
			err = l.wait(ctx)
		case txnWaitPrev:
			err = l.waitPrev(ctx)
		case txnCommit:
			if slot, ok := l.gate.tryAcquire(); ok {
				err = l.commit(ctx, slot)
			} else {
				err = l.waitSlot(ctx)
			}
		}
		if err != nil {
			return err
		}
	}
}

// idle waits, with no transaction open, for a message (it opens one), the
// commit in flight, or the end.
func (l *txnLoop) idle(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case src := <-l.stopped:
		return l.sourceStopped(src)
	case <-l.drain.done:
		if l.drain.err != nil {
			return fmt.Errorf("publishing outputs: %w", l.drain.err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		return errDrainerStopped
	case <-l.prevDone():
		return l.finishPrev()
	case m := <-l.in:
		spec := l.r.currentSpec()
		l.core.begin(txnPolicy{
			min: spec.EffectiveMinTxnDuration(), max: spec.EffectiveMaxTxnDuration(),
			maxBytes: l.maxBytes, maxMessages: l.maxMessages,
		})
		l.offsets = make(map[string]message.MessageID, 1)
		return l.consume(m)
	}
}

// wait waits, the input stalled, for a message, a timer of the open
// transaction, the commit in flight, or the end.
func (l *txnLoop) wait(ctx context.Context) error {
	select {
	case m := <-l.in:
		return l.consume(m)
	case <-l.core.minC():
		l.core.woke()
	case <-l.core.maxC():
		l.core.woke()
	case <-l.prevDone():
		return l.finishPrev()
	case <-ctx.Done():
		return ctx.Err()
	case src := <-l.stopped:
		return l.sourceStopped(src)
	}
	return nil
}

// waitPrev waits, the open transaction full, for the commit in flight (or
// the end).
func (l *txnLoop) waitPrev(ctx context.Context) error {
	select {
	case <-l.prevDone():
		return l.finishPrev()
	case <-ctx.Done():
		return ctx.Err()
	case src := <-l.stopped:
		return l.sourceStopped(src)
	}
}

// waitSlot waits, the open transaction ready to close, for a slot of the
// member's commit gate — consuming meanwhile while the transaction is not
// full — or the end.
func (l *txnLoop) waitSlot(ctx context.Context) error {
	in := l.in
	if l.core.full() {
		in = nil
	}
	select {
	case l.gate.wait() <- struct{}{}:
		return l.commit(ctx, l.gate.held())
	case m := <-in:
		return l.consume(m)
	case <-ctx.Done():
		return ctx.Err()
	case src := <-l.stopped:
		return l.sourceStopped(src)
	}
}

// commit flushes the open transaction, adds the source offsets to its batch
// and starts its commit, which holds slot. The previous commit is done
// (txnCore saw to it).
func (l *txnLoop) commit(ctx context.Context, slot *commitSlot) (err error) {
	defer l.load.busySince(time.Now())
	defer func() {
		if err != nil {
			slot.release() // no commit started
		}
	}()
	if err := safeCall("Flush", func() error { return l.consumer.Flush(l.sh, l.pub) }); err != nil {
		return l.pubErr(err)
	}
	if l.pub.err != nil {
		return l.pub.err // a partition the transaction staged to failed its check
	}
	batch := l.sh.txn
	for ch, id := range l.offsets {
		recoverylog.PutOffset(batch, ch, l.sources[ch].offset(id))
	}
	out := l.pub.seal(batch)
	// Record what is out, and delete its rows, about once a second: each
	// record is a range deletion, and many of them slow RocksDB's reads.
	if p := l.drain.published.Load(); p > l.recorded {
		if now := l.clock.Now(); now.Sub(l.recordedAt) >= recordPublishedEvery {
			recordPublished(batch, p)
			for ch, rec := range l.drain.takeMarks() {
				putChanRecord(batch, ch, rec)
			}
			l.recorded, l.recordedAt = p, now
		}
	}
	ov := l.sh.open
	if err := ov.update(batch.Data()); err != nil {
		return fmt.Errorf("index transaction batch: %w", err)
	}
	// The recorder copies the batch: it is reused for the next transaction.
	c := l.rec.Commit(ctx, batch)
	l.prev = &pendingTxn{commit: c, out: out, ov: ov, offsets: l.offsets, opened: l.core.opened, messages: l.core.messages, slot: slot}
	l.core.closed()
	l.sh.inflight = append(l.sh.inflight, ov)
	batch.Clear()
	l.sh.open = newOverlay()
	l.offsets = nil
	return nil
}
