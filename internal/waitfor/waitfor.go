package waitfor

import (
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/retry"
)

// Until's polling schedule: the first wait is about FirstInterval, each
// next one doubles up to MaxInterval (with retry's jitter).
const (
	FirstInterval = 5 * time.Millisecond
	MaxInterval   = 100 * time.Millisecond
)

// Until calls cond until it holds, waiting between calls as the schedule
// above says. Once timeout has passed since the call, and cond checked at
// the deadline still does not hold, it fails tb (Fatalf) with what and the
// last non-empty reason cond gave. Call it from the test's goroutine.
func Until(tb testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	tb.Helper()
	b := retry.Policy{Initial: FirstInterval, Max: MaxInterval}.Start()
	poll(tb, timeout, what, cond, func() time.Duration {
		d, _ := b.Next() // the policy has no attempt limit
		return d
	})
}

// Every is Until polling cond every interval instead of on Until's
// schedule: for a benchmark that times the wait (see the package doc).
func Every(tb testing.TB, interval, timeout time.Duration, what string, cond func() (bool, string)) {
	tb.Helper()
	poll(tb, timeout, what, cond, func() time.Duration { return interval })
}

// poll calls cond until it holds or, once the deadline passed, fails tb;
// next is the wait before the following call. The last wait is cut short
// so that cond is checked at the deadline.
func poll(tb testing.TB, timeout time.Duration, what string, cond func() (bool, string), next func() time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, why := cond()
		if ok {
			return
		}
		if why != "" {
			last = why
		}
		left := time.Until(deadline)
		if left <= 0 {
			if last == "" {
				last = "(the condition gave no reason)"
			}
			tb.Fatalf("timed out after %s waiting for %s: %s", timeout, what, last)
			return // a Fatalf that returns (not a *testing.T's) ends the wait too
		}
		time.Sleep(min(next(), left))
	}
}
