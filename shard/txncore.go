package shard

import "time"

// txnPolicy bounds one transaction: it closes once its input stalls after
// min, and consumes no more after max or at a size cap.
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

// txnAction is what the transaction loop does next, as txnCore decides.
type txnAction int

const (
	// txnIdle: no transaction is open. Wait for a message (it opens one) or
	// for the commit in flight.
	txnIdle txnAction = iota
	// txnConsume: take the next message if one is ready, without waiting;
	// if none is, the input stalled.
	txnConsume
	// txnWait: the input stalled before the transaction may close. Wait for
	// a message, the transaction's min or max timer, or the commit in
	// flight.
	txnWait
	// txnWaitPrev: the transaction is full and consumes no more. Wait for
	// the commit in flight.
	txnWaitPrev
	// txnCommit: close the transaction: flush it and start its commit.
	txnCommit
)

func (a txnAction) String() string {
	switch a {
	case txnIdle:
		return "idle"
	case txnConsume:
		return "consume"
	case txnWait:
		return "wait"
	case txnWaitPrev:
		return "wait for prev"
	case txnCommit:
		return "commit"
	}
	return "unknown"
}

// txnCore is the transaction loop's policy: when an open transaction stops
// consuming and when it closes. Two transactions are in play at most: one
// open (consuming) and one committing (in flight). The open one consumes
// until it is full (max duration, or a size cap) or its input stalls after
// min duration; then it closes as soon as the commit in flight is done —
// a full transaction waits for it without consuming, so no more than two
// are ever in play. It does no I/O: the loop tells it what happened
// (begin, consumed, stall, woke, prevDone, closed) and does what next says,
// waiting on the channels of the open transaction's timers (minC, maxC).
// Its time is its clock's, so a test can drive it step by step.
//
// The timers only wake the loop: next decides from the clock's time, which
// has passed a timer's duration when the timer fires (both read the same
// monotonic clock, and the timers start after opened). The per-message path
// (consumed, next) allocates nothing.
type txnCore struct {
	clock clock
	pol   txnPolicy

	open            bool      // a transaction is open
	opened          time.Time // when it opened
	bytes, messages int       // what it consumed
	stalled         bool      // the last look at the input found nothing
	inFlight        bool      // a commit is in flight
	minT, maxT      timer     // the open transaction's (nil: none)
}

// begin opens a transaction under pol, now, and starts its timers (no min
// timer when min is 0: a stall closes it at once).
func (c *txnCore) begin(pol txnPolicy) {
	c.pol = pol
	c.open = true
	c.opened = c.clock.Now()
	c.bytes, c.messages = 0, 0
	c.stalled = false
	c.maxT = c.clock.NewTimer(pol.max)
	if pol.min > 0 {
		c.minT = c.clock.NewTimer(pol.min)
	}
}

// consumed counts a message of n bytes into the open transaction.
func (c *txnCore) consumed(n int) {
	c.bytes += n
	c.messages++
	c.stalled = false
}

// stall records that the input had no message ready.
func (c *txnCore) stall() { c.stalled = true }

// woke records that a timer fired: the loop looks at its input again
// before it decides.
func (c *txnCore) woke() { c.stalled = false }

// prevDone records that the commit in flight is done.
func (c *txnCore) prevDone() {
	c.inFlight = false
	c.stalled = false
}

// closed records that the open transaction closed: its commit is in flight.
func (c *txnCore) closed() {
	c.stopTimers()
	c.open = false
	c.inFlight = true
}

// stopTimers stops the open transaction's timers.
func (c *txnCore) stopTimers() {
	if c.minT != nil {
		c.minT.Stop()
		c.minT = nil
	}
	if c.maxT != nil {
		c.maxT.Stop()
		c.maxT = nil
	}
}

// minC and maxC are the open transaction's timers' channels (nil: none,
// which a select never receives from).
func (c *txnCore) minC() <-chan time.Time {
	if c.minT == nil {
		return nil
	}
	return c.minT.C()
}

func (c *txnCore) maxC() <-chan time.Time {
	if c.maxT == nil {
		return nil
	}
	return c.maxT.C()
}

// full reports that the open transaction consumes no more.
func (c *txnCore) full() bool {
	return c.open && c.pol.full(c.clock.Now().Sub(c.opened), c.bytes, c.messages)
}

// next decides what the loop does next.
func (c *txnCore) next() txnAction {
	if !c.open {
		return txnIdle
	}
	elapsed := c.clock.Now().Sub(c.opened)
	if c.pol.full(elapsed, c.bytes, c.messages) {
		if c.inFlight {
			return txnWaitPrev
		}
		return txnCommit
	}
	if !c.stalled {
		return txnConsume
	}
	if c.pol.closeOnStall(elapsed) && !c.inFlight {
		return txnCommit
	}
	return txnWait
}
