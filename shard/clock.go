package shard

import "time"

// clock is what a primary's transaction loop and drainer read the time
// from and wait on: realClock in production, a fake that tests advance step
// by step (so the decisions of txnCore and coalescing can be checked at
// exact instants).
type clock interface {
	Now() time.Time
	// NewTimer starts a one-shot timer that sends on C once d has passed.
	NewTimer(d time.Duration) timer
}

// timer is a clock's one-shot timer.
type timer interface {
	C() <-chan time.Time
	// Stop stops the timer; it reports whether it had not fired yet.
	Stop() bool
}

// realClock is the clock of the time package.
type realClock struct{}

func (realClock) Now() time.Time                 { return time.Now() }
func (realClock) NewTimer(d time.Duration) timer { return realTimer{time.NewTimer(d)} }

// realTimer is a *time.Timer as a timer (one pointer: stored in the
// interface without an allocation of its own).
type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }
