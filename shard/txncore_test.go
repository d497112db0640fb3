package shard

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestTxnCore runs testdata/txncore: the transaction loop's policy core on
// a fake clock, driven by the events the loop feeds it. Commands:
//
//	policy [min=D] [max=D] [bytes=N] [messages=N]  the next transaction's policy
//	message [size=N]   a message arrives; the loop takes it if its action reads input
//	stall              the loop looked at its input and found nothing
//	advance D          the clock moves by D (timers due fire)
//	commit-done        the commit in flight completes
//
// The harness keeps the action the loop is in, and asks the core for the
// next one only when the loop would: after it took a message, found its
// input stalled, woke on a timer (only while it waits: elsewhere it does
// not select the timers) or saw the commit in flight done. It then plays
// the loop until it needs an event, printing the timers started and fired,
// each commit (which closes the open transaction: its commit is then in
// flight) and the action the loop is left in.
//
// "reset" starts over: a new clock, core and the default policy (min 0,
// max 1s, 1 MiB, 1000 messages).
func TestTxnCore(t *testing.T) {
	h := newTxnCoreHarness()
	datadriven.RunTest(t, "testdata/txncore", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd == "reset" {
			h = newTxnCoreHarness()
			return ""
		}
		return h.run(t, d)
	})
}

// txnCoreHarness is TestTxnCore's state across the commands of its file.
type txnCoreHarness struct {
	clk  *fakeClock
	core *txnCore
	pol  txnPolicy
	act  txnAction // the action the loop is in
}

func newTxnCoreHarness() *txnCoreHarness {
	clk := newFakeClock()
	return &txnCoreHarness{clk: clk, core: &txnCore{clock: clk},
		pol: txnPolicy{max: time.Second, maxBytes: 1 << 20, maxMessages: 1000}}
}

func (s *txnCoreHarness) run(t *testing.T, d *datadriven.TestData) string {
	c := s.core
	var out strings.Builder
	act := s.act
	switch d.Cmd {
	case "policy":
		for _, a := range d.CmdArgs {
			switch a.Key {
			case "min", "max":
				v, err := time.ParseDuration(a.Vals[0])
				if err != nil {
					d.Fatalf(t, "%s: %v", a.Key, err)
				}
				if a.Key == "min" {
					s.pol.min = v
				} else {
					s.pol.max = v
				}
			case "bytes":
				d.ScanArgs(t, "bytes", &s.pol.maxBytes)
			case "messages":
				d.ScanArgs(t, "messages", &s.pol.maxMessages)
			default:
				d.Fatalf(t, "unknown policy argument %q", a.Key)
			}
		}
		return fmt.Sprintf("min=%s max=%s bytes=%d messages=%d\n", s.pol.min, s.pol.max, s.pol.maxBytes, s.pol.maxMessages)
	case "message":
		size := 1
		if d.HasArg("size") {
			d.ScanArgs(t, "size", &size)
		}
		switch act {
		case txnIdle:
			c.begin(s.pol)
			out.WriteString(s.clk.takeLog())
			out.WriteString("open\n")
		case txnConsume, txnWait:
		default:
			return fmt.Sprintf("not taken: the loop is in %q\n", act)
		}
		c.consumed(size)
	case "stall":
		if act != txnConsume {
			d.Fatalf(t, "stall while the loop is in %q: it looks at its input only in %q", act, txnConsume)
		}
		c.stall()
	case "advance":
		v, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			d.Fatalf(t, "advance: %v", err)
		}
		s.clk.advance(v)
		out.WriteString(s.clk.takeLog())
		if act != txnWait || !s.wake(&out) {
			fmt.Fprintf(&out, "-> %s\n", act)
			return out.String()
		}
	case "commit-done":
		if act != txnIdle && act != txnWait && act != txnWaitPrev {
			d.Fatalf(t, "commit-done while the loop is in %q: it does not wait for the commit there", act)
		}
		if !c.inFlight {
			d.Fatalf(t, "commit-done: no commit in flight")
		}
		c.prevDone()
		out.WriteString("prev done\n")
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	out.WriteString(s.clk.takeLog())
	s.play(&out)
	return out.String()
}

// play does what the loop does without an event — commit, and wake on a
// timer that fired while it waits — and prints the action it is left in.
func (s *txnCoreHarness) play(out *strings.Builder) {
	c := s.core
	for {
		s.act = c.next()
		switch s.act {
		case txnCommit:
			fmt.Fprintf(out, "commit: %d messages, %d bytes, open %s\n", c.messages, c.bytes, s.clk.Now().Sub(c.opened))
			c.closed()
			out.WriteString(s.clk.takeLog())
			continue
		case txnWait:
			if s.wake(out) {
				continue
			}
		}
		fmt.Fprintf(out, "-> %s\n", s.act)
		return
	}
}

// wake wakes the waiting loop on a timer that fired, as its select would
// (the min timer first when both did), and reports whether one had.
func (s *txnCoreHarness) wake(out *strings.Builder) bool {
	for _, tm := range []struct {
		name string
		c    <-chan time.Time
	}{{"min", s.core.minC()}, {"max", s.core.maxC()}} {
		select {
		case <-tm.c:
			fmt.Fprintf(out, "woke: %s timer\n", tm.name)
			s.core.woke()
			return true
		default:
		}
	}
	return false
}

// TestTxnCoreConsumeAllocatesNothing: the loop's per-message path through
// its core (consumed, next) allocates nothing on the real clock.
func TestTxnCoreConsumeAllocatesNothing(t *testing.T) {
	c := &txnCore{clock: realClock{}}
	c.begin(txnPolicy{max: time.Hour, maxBytes: 1 << 40, maxMessages: 1 << 40})
	defer c.stopTimers()
	if n := testing.AllocsPerRun(1000, func() {
		c.consumed(100)
		if c.next() != txnConsume {
			t.Fatal("the transaction stopped consuming")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per message, want 0", n)
	}
}
