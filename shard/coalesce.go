package shard

import "time"

// maxCoalesce bounds the committed transactions published together, and
// drainLinger how long the drainer waits for more after the first when it
// published less than drainLinger ago: batches cost the server more per
// batch than per message (a single-replica stream stages each atomic batch
// in a file store of its own), so a busy shard's small transactions go out
// together, up to drainLinger later; a transaction after a quiet spell goes
// out at once. A longer linger means fewer, fuller batches (less CPU per
// output, and a lower commit latency of the state, which shares the
// server) at the cost of output latency; outputs of exactly-once systems
// become visible at commits (Kafka Streams: every 100 ms), so the linger
// stays well inside that.
const (
	maxCoalesce = 64
	drainLinger = 20 * time.Millisecond
)

// memoryMaxBatch is a batch's worth of messages for coalescing: the
// smallest batch limit of the backends (publishChannel cuts by the WAL's
// own).
const memoryMaxBatch = 999

// coalesceAction is what the drainer does next while it gathers a group,
// as coalescing decides.
type coalesceAction int

const (
	// coalesceTake: take a queued transaction if there is one, without
	// waiting; if there is none, the queue is empty.
	coalesceTake coalesceAction = iota
	// coalesceLinger: the queue is empty and the group lingers. Wait for a
	// transaction, or the linger timer.
	coalesceLinger
	// coalescePublish: publish the group.
	coalescePublish
)

func (a coalesceAction) String() string {
	switch a {
	case coalesceTake:
		return "take"
	case coalesceLinger:
		return "linger"
	case coalescePublish:
		return "publish"
	}
	return "unknown"
}

// coalescing decides how the drainer gathers a group of committed
// transactions to publish together: it starts with the first one the
// drainer received, takes what is queued already, and — only when the
// drainer published less than drainLinger before the group started — waits
// up to drainLinger from the start for more; the group is published once it
// holds maxCoalesce transactions or a batch's worth of messages, or there
// is nothing more to wait for. It does no I/O: the drainer tells it what
// happened (took, empty, woke) and does what next says, waiting on the
// linger timer's channel (lingerC). Its time is its clock's, so a test can
// drive it step by step; the timer only wakes the drainer, next decides
// from the clock's time.
type coalescing struct {
	clock      clock
	txns, msgs int       // the group so far
	lingerEnd  time.Time // zero: the group does not linger
	empty      bool      // the last look at the queue found nothing
	t          timer     // the linger timer, started at the first wait (nil: none)
}

// startCoalescing starts a group with its first transaction (msgs
// messages); published is when the drainer last published a group (zero:
// never).
func startCoalescing(clk clock, published time.Time, msgs int) coalescing {
	c := coalescing{clock: clk, txns: 1, msgs: msgs}
	now := clk.Now()
	if !published.IsZero() && now.Sub(published) < drainLinger {
		c.lingerEnd = now.Add(drainLinger) // busy: let more transactions join
	}
	return c
}

// took counts a transaction of msgs messages into the group.
func (c *coalescing) took(msgs int) {
	c.txns++
	c.msgs += msgs
	c.empty = false
}

// emptyQueue records that the queue had nothing.
func (c *coalescing) emptyQueue() { c.empty = true }

// woke records that the linger timer fired: look at the queue again.
func (c *coalescing) woke() { c.empty = false }

// lingerC is the linger timer's channel; it starts the timer, for the rest
// of the linger, on the first call.
func (c *coalescing) lingerC() <-chan time.Time {
	if c.t == nil {
		c.t = c.clock.NewTimer(c.lingerEnd.Sub(c.clock.Now()))
	}
	return c.t.C()
}

// stop stops the linger timer, if it was started.
func (c *coalescing) stop() {
	if c.t != nil {
		c.t.Stop()
	}
}

// next decides what the drainer does next.
func (c *coalescing) next() coalesceAction {
	if c.txns >= maxCoalesce || c.msgs >= memoryMaxBatch {
		return coalescePublish
	}
	if !c.empty {
		return coalesceTake
	}
	if !c.lingerEnd.IsZero() && c.clock.Now().Before(c.lingerEnd) {
		return coalesceLinger
	}
	return coalescePublish
}
