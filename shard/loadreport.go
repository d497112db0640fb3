package shard

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/consumerd/consumerd/allocator"
)

// DefaultLoadInterval is how often a service measures and reports what
// its primaries cost (Config.LoadInterval).
const DefaultLoadInterval = 10 * time.Second

// primaryLoad counts what one primary's transaction loop does: the time
// it spends working (consuming messages, building commits; not waiting
// for input, a commit slot or an acknowledgement) and the input it
// consumes. The loop adds; the load reporter reads.
type primaryLoad struct {
	item  string
	term  int64 // the slot-0 key's CreateRevision (allocator.PrimaryLoad.Term)
	since time.Time
	busy  atomic.Int64 // nanoseconds
	msgs  atomic.Int64
	bytes atomic.Int64
}

// busySince adds the time since start to the busy time.
func (pl *primaryLoad) busySince(start time.Time) { pl.busy.Add(int64(time.Since(start))) }

// loadSample is a primaryLoad's counters at one time.
type loadSample struct {
	at                time.Time
	busy, msgs, bytes int64
}

// loadSmoothWindows: a report's rates are over a primary's last
// loadSmoothWindows windows (fewer while it is new): one window's busy
// time swings widely (a commit's fsync, a burst, the scheduler), and the
// leader must not move primaries on a swing.
const loadSmoothWindows = 3

// loadReporter measures the service's primaries every interval and writes
// the member's load report (allocator.LoadReport) when it changed enough
// (allocator.LoadChanged): the leader places primaries by it. One
// goroutine and one ticker for the whole service, like the lag refresher.
type loadReporter struct {
	member *allocator.Member
	log    hclog.Logger

	mu   sync.Mutex
	live map[*primaryLoad]struct{}

	// The reporter's goroutine only:
	last    map[*primaryLoad][]loadSample // counters at the last ticks, oldest first
	lastAt  time.Time
	written allocator.LoadReport // the last report written
}

func newLoadReporter(member *allocator.Member, log hclog.Logger) *loadReporter {
	return &loadReporter{member: member, log: log, live: map[*primaryLoad]struct{}{}, last: map[*primaryLoad][]loadSample{}}
}

// add registers a primary of item under term (its slot-0 key's
// CreateRevision); remove unregisters it.
func (lr *loadReporter) add(item string, term int64) (pl *primaryLoad, remove func()) {
	pl = &primaryLoad{item: item, term: term, since: time.Now()}
	lr.mu.Lock()
	lr.live[pl] = struct{}{}
	lr.mu.Unlock()
	return pl, func() {
		lr.mu.Lock()
		delete(lr.live, pl)
		lr.mu.Unlock()
	}
}

// run reports every interval until ctx ends.
func (lr *loadReporter) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	lr.lastAt = time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			lr.tick(ctx, now)
		}
	}
}

// tick measures the window since the last tick and writes the report if
// it changed enough. A primary is in it only when it was registered for
// the whole window (the first window of a new primary is a part one).
func (lr *loadReporter) tick(ctx context.Context, now time.Time) {
	window := now.Sub(lr.lastAt)
	if window <= 0 {
		return
	}
	lr.mu.Lock()
	live := make([]*primaryLoad, 0, len(lr.live))
	for pl := range lr.live {
		live = append(live, pl)
	}
	lr.mu.Unlock()
	report := allocator.LoadReport{WindowMillis: window.Milliseconds(), Primaries: map[string]allocator.PrimaryLoad{}}
	next := make(map[*primaryLoad][]loadSample, len(live))
	for _, pl := range live {
		cur := loadSample{at: now, busy: pl.busy.Load(), msgs: pl.msgs.Load(), bytes: pl.bytes.Load()}
		hist := append(lr.last[pl], cur)
		if len(hist) > loadSmoothWindows+1 {
			hist = hist[len(hist)-loadSmoothWindows-1:]
		}
		next[pl] = hist
		if len(hist) < 2 {
			continue // registered within this window: a part window
		}
		old := hist[0]
		secs := now.Sub(old.at).Seconds()
		perSecond := func(d int64) int64 { return int64(float64(d) / secs) }
		report.Primaries[pl.item] = allocator.PrimaryLoad{Term: pl.term, AgeMillis: now.Sub(pl.since).Milliseconds(),
			BusyMicros: perSecond(cur.busy-old.busy) / 1000, Messages: perSecond(cur.msgs - old.msgs), Bytes: perSecond(cur.bytes - old.bytes)}
	}
	lr.last, lr.lastAt = next, now
	if report.WindowMillis <= 0 || !allocator.LoadChanged(lr.written, report) {
		return
	}
	if err := lr.member.ReportLoad(ctx, report); err != nil {
		if ctx.Err() == nil {
			lr.log.Warn("writing the member's load report failed; the next window tries again", "error", err)
		}
		return
	}
	lr.written = report
}
