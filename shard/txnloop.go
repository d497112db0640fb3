package shard

import (
	"context"
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

// txnPolicy decides when an open transaction stops consuming and when it may
// close. It is pure: the loop feeds it elapsed time and sizes.
type txnPolicy struct {
	min, max    time.Duration
	maxBytes    int
	maxMessages int
}

// full reports that the transaction must consume no more: max duration
// reached, or a size cap hit. It closes as soon as the previous commit is
// done.
func (p txnPolicy) full(elapsed time.Duration, bytes, messages int) bool {
	return elapsed >= p.max || bytes >= p.maxBytes || messages >= p.maxMessages
}

// closeOnStall reports that a transaction whose input stalled may close
// (once the previous commit is done): min duration reached.
func (p txnPolicy) closeOnStall(elapsed time.Duration) bool { return elapsed >= p.min }

// pendingTxn is a transaction whose commit is in flight.
type pendingTxn struct {
	commit   *recoverylog.Commit
	out      *outTxn // its outputs, for the drainer once applied (nil: none)
	ov       *overlay
	offsets  map[string]message.MessageID
	opened   time.Time
	messages int
}

// txnLoop is a primary's transaction loop. Two transactions are in play at
// most: one consuming (open) and one committing (prev).
type txnLoop struct {
	r           *replica
	sh          *primaryShard
	consumer    Consumer
	rec         *recoverylog.Recorder
	pub         *txnPublisher
	drain       *drainer
	recorded    uint64    // the outbox-published the last commit recorded
	recordedAt  time.Time // when
	in          <-chan inbound
	stopped     <-chan *source // a source's scanner stopped
	lag         *lagTracker
	maxBytes    int
	maxMessages int

	prev *pendingTxn

	// metric children, resolved once
	mMessages, mBytes, mTxns prometheus.Counter

	// open transaction
	opened   time.Time
	offsets  map[string]message.MessageID
	bytes    int
	messages int
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
	l.mTxns.Inc()
	metricTxnDuration.Observe(time.Since(p.opened).Seconds())
	l.r.committed(int64(l.rec.Position().LogID), time.Now())
	l.lag.commit(p.offsets)
	return nil
}

func (l *txnLoop) consume(m inbound) error {
	env := topic.Envelope{Partition: m.src.part, Message: m.msg}
	if err := safeCall("Consume", func() error { return l.consumer.Consume(l.sh, env, l.pub) }); err != nil {
		return fmt.Errorf("message %s@%d: %w", m.src.channel, m.msg.ID, err)
	}
	n := m.msg.Size()
	l.offsets[m.src.channel] = m.msg.ID
	l.bytes += n
	l.messages++
	l.mMessages.Inc()
	l.mBytes.Add(float64(n))
	return nil
}

// run consumes and commits until ctx is done or an error.
func (l *txnLoop) run(ctx context.Context) error {
	l.mMessages = metricMessages.WithLabelValues(l.r.id)
	l.mBytes = metricBytes.WithLabelValues(l.r.id)
	l.mTxns = metricTransactions.WithLabelValues(l.r.id)
	for {
		// Idle: no open transaction.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case src := <-l.stopped:
			return src.stopErr()
		case <-l.drain.done:
			if l.drain.err != nil {
				return fmt.Errorf("publishing outputs: %w", l.drain.err)
			}
			return ctx.Err()
		case <-l.prevDone():
			if err := l.finishPrev(); err != nil {
				return err
			}
			continue
		case m := <-l.in:
			l.opened = time.Now()
			l.offsets = make(map[string]message.MessageID, 1)
			l.bytes, l.messages = 0, 0
			if err := l.consume(m); err != nil {
				return err
			}
		}
		if err := l.fill(ctx); err != nil {
			return err
		}
		if err := l.commit(ctx); err != nil {
			return err
		}
	}
}

// fill consumes into the open transaction until it may close: it is full
// (max duration or size cap) or its input stalled after min duration, and
// the previous commit is done.
func (l *txnLoop) fill(ctx context.Context) error {
	spec := l.r.currentSpec()
	pol := txnPolicy{
		min: spec.EffectiveMinTxnDuration(), max: spec.EffectiveMaxTxnDuration(),
		maxBytes: l.maxBytes, maxMessages: l.maxMessages,
	}
	maxT := time.NewTimer(pol.max)
	defer maxT.Stop()
	var minC <-chan time.Time
	if pol.min > 0 {
		minT := time.NewTimer(pol.min)
		defer minT.Stop()
		minC = minT.C
	}
	maxReached, minReached := false, pol.min <= 0
	for {
		full := maxReached || pol.full(time.Since(l.opened), l.bytes, l.messages)
		if full {
			if l.prev == nil {
				return nil
			}
			select {
			case <-l.prevDone():
				if err := l.finishPrev(); err != nil {
					return err
				}
			case <-ctx.Done():
				return ctx.Err()
			case src := <-l.stopped:
				return src.stopErr()
			}
			continue
		}
		select {
		case m := <-l.in:
			if err := l.consume(m); err != nil {
				return err
			}
			continue
		default:
		}
		// Input stalled.
		if !minReached {
			minReached = pol.closeOnStall(time.Since(l.opened))
		}
		if minReached && l.prev == nil {
			return nil
		}
		select {
		case m := <-l.in:
			if err := l.consume(m); err != nil {
				return err
			}
		case <-minC:
			minReached = true
		case <-maxT.C:
			maxReached = true
		case <-l.prevDone():
			if err := l.finishPrev(); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		case src := <-l.stopped:
			return src.stopErr()
		}
	}
}

// commit flushes the open transaction, adds the source offsets to its batch
// and starts its commit. The previous commit is done (fill saw to it).
func (l *txnLoop) commit(ctx context.Context) error {
	if err := safeCall("Flush", func() error { return l.consumer.Flush(l.sh, l.pub) }); err != nil {
		return err
	}
	batch := l.sh.txn
	for ch, id := range l.offsets {
		recoverylog.PutOffset(batch, ch, id)
	}
	out := l.pub.seal(batch)
	// Record what is out, and delete its rows, about once a second: each
	// record is a range deletion, and many of them slow RocksDB's reads.
	if p := l.drain.published.Load(); p > l.recorded && time.Since(l.recordedAt) >= recordPublishedEvery {
		recordPublished(batch, p)
		l.recorded, l.recordedAt = p, time.Now()
	}
	ov := l.sh.open
	if err := ov.update(batch.Data()); err != nil {
		return fmt.Errorf("index transaction batch: %w", err)
	}
	// The recorder copies the batch: it is reused for the next transaction.
	c := l.rec.Commit(ctx, batch)
	l.prev = &pendingTxn{commit: c, out: out, ov: ov, offsets: l.offsets, opened: l.opened, messages: l.messages}
	l.sh.inflight = append(l.sh.inflight, ov)
	batch.Clear()
	l.sh.open = newOverlay()
	l.offsets = nil
	return nil
}
