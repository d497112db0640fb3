package shard

import (
	"sync"
	"time"
)

// DefaultCommitsInFlight is Config.CommitsInFlight's default.
const DefaultCommitsInFlight = 4

// commitSlotHold bounds how long one commit holds its slot: a commit that
// stalls (its log's stream without a leader, its retries running) keeps
// the member's other primaries waiting no longer than this.
const commitSlotHold = 250 * time.Millisecond

// commitGate bounds the recovery-log commits a member's primaries have in
// flight. A primary whose open transaction may close waits for a slot while
// it goes on consuming into that transaction.
//
// Why: a commit's cost (a log append, its stream's store, the database
// write, and on outputs an atomic batch) is mostly per transaction, not per
// message. Each primary already commits as soon as its previous commit is
// done, so its transactions grow with its commit latency. But the latency
// a primary sees falls as its stream's share of the server's work falls:
// spread the same input over hundreds of shards and each commits a message
// or two at a time, and the member spends its time on transactions. A few
// slots make the wait, and so the transactions' size, grow with the
// number of busy primaries instead; with a few busy primaries nothing
// waits.
type commitGate struct {
	slots chan struct{}
}

func newCommitGate(n int) *commitGate {
	return &commitGate{slots: make(chan struct{}, n)}
}

// tryAcquire takes a free slot, if there is one.
func (g *commitGate) tryAcquire() (*commitSlot, bool) {
	select {
	case g.slots <- struct{}{}:
		return g.held(), true
	default:
		return nil, false
	}
}

// wait is the channel a select sends on to take a slot (then call held).
func (g *commitGate) wait() chan<- struct{} { return g.slots }

// held is the slot just taken through wait: it is given back by release,
// or after commitSlotHold.
func (g *commitGate) held() *commitSlot {
	s := &commitSlot{g: g}
	s.t = time.AfterFunc(commitSlotHold, s.giveBack)
	return s
}

// commitSlot is one commit's slot.
type commitSlot struct {
	g    *commitGate
	t    *time.Timer
	once sync.Once
}

// release gives the slot back (once; safe on nil). The goroutine that
// took the slot calls it.
func (s *commitSlot) release() {
	if s == nil {
		return
	}
	s.t.Stop()
	s.giveBack()
}

// giveBack frees the slot, once: by release or by the hold timer.
func (s *commitSlot) giveBack() {
	s.once.Do(func() { <-s.g.slots })
}
