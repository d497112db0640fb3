package waitfor_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/waitfor"
)

// recordingTB is a testing.TB that records Fatalf and Errorf instead of
// ending the test, so a test can check how Until fails.
type recordingTB struct {
	testing.TB // nil: any other method panics
	fatals     []string
	errors     []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fatals = append(r.fatals, fmt.Sprintf(format, args...))
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// TestUntilReturnsOnceCondHolds: Until returns as soon as cond holds,
// without failing, and does not call cond again.
func TestUntilReturnsOnceCondHolds(t *testing.T) {
	var tb recordingTB
	calls := 0
	waitfor.Until(&tb, time.Minute, "the third call", func() (bool, string) {
		calls++
		return calls == 3, fmt.Sprintf("call %d", calls)
	})
	if len(tb.fatals) != 0 || len(tb.errors) != 0 {
		t.Fatalf("Until failed a condition that held: fatals %q, errors %q", tb.fatals, tb.errors)
	}
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3 (it held on the third)", calls)
	}
}

// TestUntilFailsWithWhatAndLastReason: a condition that never holds fails
// tb once, after the timeout and a check at the deadline, naming what was
// awaited and the last non-empty reason (the later calls give none).
func TestUntilFailsWithWhatAndLastReason(t *testing.T) {
	var tb recordingTB
	const timeout = 200 * time.Millisecond
	start := time.Now()
	var lastCall time.Time
	calls := 0
	waitfor.Until(&tb, timeout, "the moon", func() (bool, string) {
		calls++
		lastCall = time.Now()
		if calls > 2 {
			return false, "" // keeps the previous reason
		}
		return false, fmt.Sprintf("still no moon (%d)", calls)
	})
	if len(tb.fatals) != 1 || len(tb.errors) != 0 {
		t.Fatalf("fatals %q, errors %q; want one Fatalf", tb.fatals, tb.errors)
	}
	if calls < 3 {
		t.Fatalf("cond called %d times in %s, want it polled more", calls, timeout)
	}
	if msg := tb.fatals[0]; !strings.Contains(msg, "waiting for the moon") || !strings.HasSuffix(msg, "still no moon (2)") {
		t.Fatalf("failure %q: want it to name the moon and the last reason given, call 2's", msg)
	}
	if since := lastCall.Sub(start); since < timeout {
		t.Fatalf("the last check came %s after the start, before the %s timeout", since, timeout)
	}
}

// TestUntilFailsWithoutReason: a condition that never gives a reason still
// fails with a readable message.
func TestUntilFailsWithoutReason(t *testing.T) {
	var tb recordingTB
	waitfor.Until(&tb, time.Millisecond, "nothing", func() (bool, string) { return false, "" })
	if len(tb.fatals) != 1 || !strings.Contains(tb.fatals[0], "no reason") {
		t.Fatalf("fatals %q, want one saying the condition gave no reason", tb.fatals)
	}
}

// TestEveryPollsAtItsInterval: Every waits its interval between calls.
func TestEveryPollsAtItsInterval(t *testing.T) {
	var tb recordingTB
	const interval = 20 * time.Millisecond
	start := time.Now()
	calls := 0
	waitfor.Every(&tb, interval, time.Minute, "the third call", func() (bool, string) {
		calls++
		return calls == 3, ""
	})
	if len(tb.fatals) != 0 {
		t.Fatalf("Every failed a condition that held: %q", tb.fatals)
	}
	if took := time.Since(start); took < 2*interval {
		t.Fatalf("three calls took %s, want at least two intervals of %s", took, interval)
	}
}
