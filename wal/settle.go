package wal

import (
	"fmt"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// recover settles a drained window whose head failed, then sends the appends
// held meanwhile, then delivers again. It runs on its own goroutine (owned by
// the WAL: Close waits for it) holding the delivering role, since retrying
// waits for replies that the backend's reply goroutine must stay free to
// deliver.
func (w *walAdaptor) recover(items []*asyncItem) {
	p := &w.pipe
	defer p.recovering.Done()
	failed := w.settleDrained(items)
	p.smu.Lock()
	p.cmu.Lock()
	held := p.held
	p.held = nil
	p.draining = false
	p.cmu.Unlock()
	for _, it := range held {
		if failed != nil {
			// Accepted while an earlier append of this fenced WAL was
			// failing: never stored after the gap it left.
			w.complete(it, 0, w.abandoned(failed))
			continue
		}
		p.cmu.Lock()
		w.sendLocked(it) // this goroutine delivers below
	}
	p.smu.Unlock()
	p.cmu.Lock()
	w.deliverLocked()
}

// settleDrained settles a drained window in call order, following
// planSettle, and retries what it says to retry with the WAL's retry
// policy: pipelined in rounds when every one is idempotent
// (resendIdempotent), else one at a time. On a fenced WAL it returns the first error an append
// ended with (after which every later append of the window was abandoned).
func (w *walAdaptor) settleDrained(items []*asyncItem) (failed error) {
	outs := make([]settleOutcome, len(items))
	for i, it := range items {
		outs[i] = settleOutcome{dispatched: it.dispatched, err: it.err, idempotent: w.idempotent(it)}
	}
	chained := w.term > 0
	plan := planSettle(outs, chained)
	resends := w.resendIdempotent(items, plan)
	for i, action := range plan {
		it := items[i]
		if failed != nil && !outs[i].stored() {
			w.complete(it, 0, w.abandoned(failed))
			continue
		}
		var err error
		switch action {
		case settleReport, settleAbandon: // abandon: only after failed is set, above
			err = w.outcomeErr(it)
			w.complete(it, it.id, err)
		case settleDrop:
			err = fmt.Errorf("wal: append to %q: not retried because a later append was already stored: %w", w.channel, it.err)
			w.complete(it, 0, err)
		case settleRetry:
			var id message.MessageID
			if resends != nil {
				id, err = resends[i].id, resends[i].err
			} else if err = w.precheck(it); err == nil {
				id, err = w.appendWithRetry(it)
			}
			w.complete(it, id, err)
		}
		if chained && err != nil && failed == nil {
			failed = err
		}
	}
	return failed
}

// abandoned is the error of a fenced WAL's append that was not stored
// because an earlier one failed.
func (w *walAdaptor) abandoned(cause error) error {
	return fmt.Errorf("wal: append to %q: not appended because an earlier append failed: %w", w.channel, cause)
}

// idempotent reports whether it is an unfenced append that carries a
// DedupeID: a resend of it is acknowledged as a duplicate if it was stored,
// so retrying it cannot store it twice (within the backend's duplicate
// window).
func (w *walAdaptor) idempotent(it *asyncItem) bool {
	return w.term == 0 && it.msg.DedupeID != ""
}

// appendWithRetry retries a failed append synchronously at the backend,
// with the WAL's retry policy; the pipelined try that failed counts as the
// first attempt. An idempotent append is retried until its context ends or
// the WAL closes, whatever the policy's attempts: a broker restart or a
// leader change may take longer than they last, and waiting it out is what
// its caller wants (it bounds the wait with the context).
func (w *walAdaptor) appendWithRetry(it *asyncItem) (message.MessageID, error) {
	var id message.MessageID
	first := true
	policy := w.opts.retry
	if w.idempotent(it) {
		policy.Attempts = 0
	}
	err := w.doWith(it.ctx, policy, "append to "+w.channel, func() error {
		if first {
			first = false
			return it.err
		}
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

// settleAction is what happens to one append of a drained window.
type settleAction int

const (
	// settleReport reports the outcome as it is (stored, or a final error).
	settleReport settleAction = iota
	// settleDrop reports the transient error without retrying: a later
	// append was stored, so a retry would store this one out of order, and
	// without a DedupeID perhaps twice.
	settleDrop
	// settleRetry retries the append (in order, one at a time).
	settleRetry
	// settleAbandon fails the append of a fenced WAL because an earlier
	// one failed for good: storing it would leave a gap behind it.
	settleAbandon
)

func (a settleAction) String() string {
	switch a {
	case settleReport:
		return "report"
	case settleDrop:
		return "drop"
	case settleRetry:
		return "retry"
	case settleAbandon:
		return "abandon"
	default:
		return fmt.Sprintf("settleAction(%d)", int(a))
	}
}

// settleOutcome is the outcome of one append of a drained window.
type settleOutcome struct {
	dispatched bool // handed to the backend
	err        error
	idempotent bool // unfenced with a DedupeID: a resend cannot store it twice
}

func (o settleOutcome) stored() bool { return o.dispatched && o.err == nil }

// firstFailed is the index of the first final failure, or -1.
func firstFailed(outs []settleOutcome) int {
	for i, o := range outs {
		if o.err != nil && !walimpls.IsRetryable(o.err) {
			return i
		}
	}
	return -1
}

// planSettle decides, for a drained window in call order, which appends are
// reported, retried, dropped or abandoned. Pure: no I/O.
//
// Unchained (term 0): a transient failure after the last stored append is
// retried; one before it is dropped (a retry would store it out of order),
// unless it is idempotent: then it is retried too, in call order, so that a
// broker restart loses nothing and stores nothing twice. Its reply may have
// been lost (then the resend is acknowledged as a duplicate, in place); if
// it really was not stored, it is stored after the later ones — the one
// case where an idempotent append is stored out of call order, rather than
// not at all.
//
// Chained (a fenced WAL, whose backend keeps what is stored a prefix of the
// calls): every transient failure is retried in order — a stored append
// after a failed one means the failed one was stored too (its reply was
// lost), and its retry, under the same DedupeID, is acknowledged as a
// duplicate — until the first final failure; every later append not already
// stored is abandoned.
func planSettle(outs []settleOutcome, chained bool) []settleAction {
	plan := make([]settleAction, len(outs))
	if chained {
		stop := firstFailed(outs)
		for i, o := range outs {
			switch {
			case o.err == nil, i == stop:
				plan[i] = settleReport
			case stop >= 0 && i > stop:
				plan[i] = settleAbandon
			case walimpls.IsRetryable(o.err):
				plan[i] = settleRetry
			default:
				plan[i] = settleReport
			}
		}
		return plan
	}
	lastStored := -1
	for i, o := range outs {
		if o.stored() {
			lastStored = i
		}
	}
	for i, o := range outs {
		switch {
		case o.err == nil || !walimpls.IsRetryable(o.err):
			plan[i] = settleReport
		case i < lastStored && !o.idempotent:
			plan[i] = settleDrop
		default:
			plan[i] = settleRetry
		}
	}
	return plan
}
