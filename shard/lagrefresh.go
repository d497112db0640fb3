package shard

import (
	"context"
	"sync"
	"time"
)

// lagRefresher refreshes the lag of every primary of a service from one
// goroutine and one ticker, the service's (Service.Run starts it): an idle
// primary holds no goroutine or timer of its own for its lag. Each tick
// refreshes the trackers registered then, one after the other, so a source
// that does not answer (each question is bounded by 5 s, see
// lagTracker.refresh) delays the others' refresh by as much; a tick that
// comes during a sweep is dropped (time.Ticker), not queued.
type lagRefresher struct {
	mu       sync.Mutex
	trackers map[*lagTracker]*lagEntry
}

// idleLagTicks: a primary that committed nothing since its lag was last
// refreshed is refreshed every idleLagTicks ticks only (10 s by default),
// not at every tick. Its lag moves only when its sources get messages —
// which its scanners deliver and it commits, making it due at the next
// tick — or when a scanner stalls or a source loses messages (the
// verifying scanner stops on a loss it sees; this refresh is the backstop).
// A second of lag freshness is not worth a question per idle source per
// second: with 1,000 idle shards that was most of a member's idle CPU and
// a thousand stream look-ups a second on the server.
const idleLagTicks = 10

// lagEntry is one registered tracker: ctx is its primary's (it bounds a
// refresh), and run is held while it is refreshed, so that unregistering
// waits for a refresh in flight. skipped counts the ticks since its last
// refresh (the refresher's goroutine only).
type lagEntry struct {
	ctx     context.Context
	run     sync.Mutex
	removed bool
	skipped int
}

func newLagRefresher() *lagRefresher {
	return &lagRefresher{trackers: make(map[*lagTracker]*lagEntry)}
}

// add registers lt, refreshed with ctx until remove; remove returns once no
// refresh of lt runs, nor will.
func (lr *lagRefresher) add(ctx context.Context, lt *lagTracker) (remove func()) {
	ctx, cancel := context.WithCancel(ctx)
	e := &lagEntry{ctx: ctx, skipped: idleLagTicks} // due at the first tick
	lr.mu.Lock()
	lr.trackers[lt] = e
	lr.mu.Unlock()
	return func() {
		cancel() // ends a refresh in flight early
		lr.mu.Lock()
		delete(lr.trackers, lt)
		lr.mu.Unlock()
		e.run.Lock()
		e.removed = true
		e.run.Unlock()
	}
}

// run refreshes the registered trackers every interval until ctx ends.
func (lr *lagRefresher) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			lr.refreshAll(ctx)
		}
	}
}

func (lr *lagRefresher) refreshAll(ctx context.Context) {
	lr.mu.Lock()
	due := make(map[*lagTracker]*lagEntry, len(lr.trackers))
	for lt, e := range lr.trackers {
		due[lt] = e
	}
	lr.mu.Unlock()
	for lt, e := range due {
		if ctx.Err() != nil {
			return
		}
		e.skipped++
		if !lt.active.Swap(false) && e.skipped < idleLagTicks {
			continue
		}
		e.skipped = 0
		e.run.Lock()
		if !e.removed && e.ctx.Err() == nil {
			lt.refresh(e.ctx)
		}
		e.run.Unlock()
	}
}
