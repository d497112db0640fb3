package shard

import (
	"fmt"
	"strings"
	"time"
)

// fakeClock is a clock that moves only when advanced: its timers fire
// (send on their channel, in deadline order) when advance reaches their
// deadline. It logs timers started and fired, for tests to print.
type fakeClock struct {
	now    time.Time
	timers []*fakeTimer // started, not yet fired or stopped
	log    []string
}

type fakeTimer struct {
	c  *fakeClock
	d  time.Duration
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) NewTimer(d time.Duration) timer {
	t := &fakeTimer{c: c, d: d, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	c.log = append(c.log, fmt.Sprintf("timer %s started", d))
	c.timers = append(c.timers, t)
	c.fire()
	return t
}

// advance moves the clock by d and fires the timers due.
func (c *fakeClock) advance(d time.Duration) {
	c.now = c.now.Add(d)
	c.fire()
}

func (c *fakeClock) fire() {
	for {
		i := -1
		for j, t := range c.timers {
			if !t.at.After(c.now) && (i < 0 || t.at.Before(c.timers[i].at)) {
				i = j
			}
		}
		if i < 0 {
			return
		}
		t := c.timers[i]
		c.timers = append(c.timers[:i], c.timers[i+1:]...)
		t.ch <- c.now
		c.log = append(c.log, fmt.Sprintf("timer %s fired", t.d))
	}
}

// takeLog returns the log since the last call, one line per entry.
func (c *fakeClock) takeLog() string {
	var b strings.Builder
	for _, l := range c.log {
		b.WriteString(l + "\n")
	}
	c.log = c.log[:0]
	return b.String()
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	for i, u := range t.c.timers {
		if u == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}
