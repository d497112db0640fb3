package shard

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestCoalescing runs testdata/coalesce: the drainer's gathering of a group
// (coalescing) on a fake clock. Commands:
//
//	enqueue [n=N] [msgs=M]  the loop enqueues N committed transactions of M messages
//	advance D               the clock moves by D (timers due fire)
//	reset                   start over: a new clock, an empty queue, never published
//
// The harness plays the drainer as run and gather do: idle, it takes the
// first queued transaction and starts a group (printing whether it
// lingers); it takes, lingers or publishes as coalescing decides, asking
// again only when the drainer would (after it took a transaction, found the
// queue empty or woke on the linger timer); a publish takes no time, and
// the drainer then starts the next group if the queue holds one. It prints
// the timers started and fired, each group published, and the action the
// drainer is left in.
func TestCoalescing(t *testing.T) {
	h := newCoalesceHarness()
	datadriven.RunTest(t, "testdata/coalesce", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "reset":
			h = newCoalesceHarness()
			return ""
		case "enqueue":
			n, msgs := 1, 1
			if d.HasArg("n") {
				d.ScanArgs(t, "n", &n)
			}
			if d.HasArg("msgs") {
				d.ScanArgs(t, "msgs", &msgs)
			}
			for range n {
				h.queue = append(h.queue, msgs)
			}
			var out strings.Builder
			switch {
			case h.group == nil: // the idle drainer takes it
				h.play(&out)
			case h.act == coalesceLinger: // the lingering drainer takes it
				h.group.took(h.queue[0])
				h.queue = h.queue[1:]
				h.play(&out)
			default:
				fmt.Fprintf(&out, "-> %s\n", h.act)
			}
			return out.String()
		case "advance":
			v, err := time.ParseDuration(d.CmdArgs[0].Key)
			if err != nil {
				d.Fatalf(t, "advance: %v", err)
			}
			h.clk.advance(v)
			var out strings.Builder
			out.WriteString(h.clk.takeLog())
			if h.group != nil && h.act == coalesceLinger {
				select {
				case <-h.group.lingerC():
					out.WriteString("woke: linger timer\n")
					h.group.woke()
					h.play(&out)
					return out.String()
				default:
				}
			}
			fmt.Fprintf(&out, "-> %s\n", h.state())
			return out.String()
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

// coalesceHarness is TestCoalescing's state across the commands of its
// file: the drainer's queue (each transaction's message count), its group
// in progress and when it last published.
type coalesceHarness struct {
	clk       *fakeClock
	queue     []int
	group     *coalescing // nil: idle
	act       coalesceAction
	published time.Time
	start     time.Time // when the group started
}

func newCoalesceHarness() *coalesceHarness { return &coalesceHarness{clk: newFakeClock()} }

func (h *coalesceHarness) state() string {
	if h.group == nil {
		return "idle"
	}
	if h.act == coalesceLinger {
		return fmt.Sprintf("linger (%s left)", h.group.lingerEnd.Sub(h.clk.Now()))
	}
	return h.act.String()
}

// play runs the drainer until it needs an event: a transaction (idle or
// lingering) or the linger timer.
func (h *coalesceHarness) play(out *strings.Builder) {
	for {
		if h.group == nil {
			if len(h.queue) == 0 {
				break
			}
			first := h.queue[0]
			h.queue = h.queue[1:]
			g := startCoalescing(h.clk, h.published, first)
			h.group, h.start = &g, h.clk.Now()
			switch {
			case !g.lingerEnd.IsZero():
				fmt.Fprintf(out, "group starts: lingers %s (published %s ago)\n", g.lingerEnd.Sub(h.clk.Now()), h.clk.Now().Sub(h.published))
			case h.published.IsZero():
				out.WriteString("group starts: no linger (never published)\n")
			default:
				fmt.Fprintf(out, "group starts: no linger (published %s ago)\n", h.clk.Now().Sub(h.published))
			}
		}
		g := h.group
		h.act = g.next()
		switch h.act {
		case coalesceTake:
			if len(h.queue) == 0 {
				g.emptyQueue()
				continue
			}
			g.took(h.queue[0])
			h.queue = h.queue[1:]
			continue
		case coalesceLinger:
			g.lingerC() // the drainer waits on it (and the queue)
		case coalescePublish:
			fmt.Fprintf(out, "publish: %d txns, %d msgs, after %s\n", g.txns, g.msgs, h.clk.Now().Sub(h.start))
			g.stop()
			h.group, h.published = nil, h.clk.Now()
			continue
		}
		break
	}
	out.WriteString(h.clk.takeLog())
	fmt.Fprintf(out, "-> %s\n", h.state())
}
