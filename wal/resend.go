package wal

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// resent is the final outcome of an append resendIdempotent resent.
type resent struct {
	id  message.MessageID
	err error
}

// resendIdempotent settles the appends of a drained window that plan says
// to retry when every one of them is idempotent (see idempotent); it returns
// nil, leaving them to the one-at-a-time path, otherwise. It resends them
// pipelined, in call order, in rounds: each round, after a backoff of the
// WAL's policy, resends the first one not yet settled and, once that one
// is stored, all the others, and waits for their outcomes; transient
// failures go to the next round. Order
// holds because a round sends in call order and a resend of one already
// stored is acknowledged as a duplicate. It ends for an append when its
// context ends or the WAL closes, whatever the policy's attempts (see
// appendWithRetry). After a broker restart a window of thousands is resent
// in one round trip, not one per append.
func (w *walAdaptor) resendIdempotent(items []*asyncItem, plan []settleAction) []resent {
	var todo []int
	for i, a := range plan {
		if a != settleRetry {
			continue
		}
		if !w.idempotent(items[i]) {
			return nil
		}
		todo = append(todo, i)
	}
	if len(todo) == 0 {
		return nil
	}
	all := slices.Clone(todo)
	out := make([]resent, len(items))
	for _, i := range todo {
		out[i].err = items[i].err
	}
	policy := w.opts.retry
	policy.Attempts = 0
	b := policy.Start()
	for round := 1; ; round++ {
		todo = slices.DeleteFunc(todo, func(i int) bool { return items[i].ctx.Err() != nil })
		if len(todo) == 0 {
			break
		}
		wait, _ := b.Next()
		w.logger.Debug("resending idempotent appends", "count", len(todo), "round", round, "backoff", wait, "error", out[todo[0]].err)
		if !w.pause(items[todo[0]], wait) {
			if w.isClosing() {
				break
			}
			continue // the first one's context ended: the others may go on
		}
		// A probe first: while the broker recovers (a restart), the first
		// appends it gets fail and later ones may be stored; resending the
		// rest only once one is stored keeps the failures a prefix, and so
		// the order.
		if again := w.resendRound(items, todo[:1], out); len(again) > 0 {
			continue
		}
		todo = w.resendRound(items, todo[1:], out)
	}
	for _, i := range all {
		switch err := out[i].err; {
		case err == nil:
		case walimpls.IsRetryable(err): // resending ended: context or Close
			out[i].err = w.endedErr(items[i], err)
		default:
			out[i].err = fmt.Errorf("wal: append to %q: %w", w.channel, err)
		}
	}
	return out
}

// pause waits d, or less if the WAL closes or it's context ends first; it
// reports whether it waited all of d.
func (w *walAdaptor) pause(it *asyncItem, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.closing:
	case <-it.ctx.Done():
	}
	return false
}

func (w *walAdaptor) isClosing() bool {
	select {
	case <-w.closing:
		return true
	default:
		return false
	}
}

// endedErr is the error of an append whose resending ended (its context
// ended or the WAL closed) with last its last error.
func (w *walAdaptor) endedErr(it *asyncItem, last error) error {
	if w.isClosing() {
		return fmt.Errorf("wal: append to %q: %w while retrying (last error: %w)", w.channel, ErrClosed, last)
	}
	if err := it.ctx.Err(); err != nil {
		return fmt.Errorf("wal: append to %q: %w while retrying (last error: %w)", w.channel, err, last)
	}
	return fmt.Errorf("wal: append to %q: %w", w.channel, last)
}

// resendRound hands the appends todo (indexes of items, in call order,
// with live contexts) to the backend, waits for their outcomes into out,
// and returns those to resend again: transient failures of appends whose
// context is still live.
func (w *walAdaptor) resendRound(items []*asyncItem, todo []int, out []resent) []int {
	var wg sync.WaitGroup
	for _, i := range todo {
		w.m.retries.Inc()
		wg.Add(1)
		prev := out[i].err
		w.async.AppendAsync(items[i].ctx, items[i].msg, func(id message.MessageID, err error) {
			if err != nil && items[i].ctx.Err() != nil && walimpls.IsRetryable(prev) {
				err = prev // the context ended: the failure worth naming is the last one
			}
			out[i] = resent{id: id, err: err}
			wg.Done()
		})
	}
	wg.Wait()
	var next []int
	for _, i := range todo {
		if err := out[i].err; err != nil && walimpls.IsRetryable(err) && items[i].ctx.Err() == nil {
			next = append(next, i)
		}
	}
	return next
}
