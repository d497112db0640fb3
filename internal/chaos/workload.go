package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The workload: lines published to the pipeline's "lines" topic in batches,
// each batch by `consumerd publish --id`, so retrying a batch after a failed
// or unanswered publish stores none of its lines twice.

// line is input line i: a token no other line has (so a lost or doubled
// line shows in its own count) and tokens many lines share (so counts are
// read-modify-writes of hot keys).
func line(i int) string {
	return fmt.Sprintf("u%d h%d w%d w%d", i, i%5, i%37, (i*7+3)%37)
}

// batchLines is the text of batch k of n lines.
func batchLines(k, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = line(k*n + i)
	}
	return out
}

// dedupeWindow is the duplicate window of the run's streams (JetStream's
// default): a batch must be acknowledged within it of its first attempt, or
// a retry could store lines twice.
const dedupeWindow = 2 * time.Minute

// publishBatch publishes batch k, retrying the whole batch with the same
// run id until every line is acknowledged. It gives up (an anomaly) when the
// batch is not acknowledged well within the dedupe window.
func (c *cluster) publishBatch(ctx context.Context, seed uint64, k int, lines []string, logf func(string, ...any)) error {
	id := fmt.Sprintf("chaos%d-b%d", seed, k)
	stdin := []byte(strings.Join(lines, "\n") + "\n")
	deadline := time.Now().Add(dedupeWindow - 30*time.Second)
	for attempt := 1; ; attempt++ {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("batch %d (publish --id %s) not acknowledged within %s", k, id, dedupeWindow-30*time.Second)
		}
		timeout := min(left, 30*time.Second)
		_, err := c.client(ctx, timeout+5*time.Second, stdin, "publish", "--topic", "lines", "--id", id, "--timeout", timeout.String())
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		logf("publish batch %d attempt %d: %v", k, attempt, err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond): // a failed attempt retries soon: the fault may last
		}
	}
}
