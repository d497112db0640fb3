package shard

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// TestLagRefresherRefreshesUntilRemoved: the service's one refresher keeps
// refreshing every registered primary's lag, and none after its remove
// returned (a refresh then would bring back the lag series the stopping
// primary deletes).
func TestLagRefresherRefreshesUntilRemoved(t *testing.T) {
	op, err := wal.NewOpenerBuilder(memory.NewBuilder()).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	ctx, cancel := context.WithCancel(context.Background())
	lr := newLagRefresher()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); lr.run(ctx, time.Millisecond) }()
	defer func() { cancel(); wg.Wait() }()

	track := func(id string) (*replica, func()) {
		w, err := op.Open(ctx, &wal.OpenOption{Channel: id})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		r := &replica{id: id, logger: hclog.NewNullLogger()}
		t.Cleanup(func() { metricSourceLag.DeleteLabelValues(id, id) })
		src := &source{channel: id, log: w}
		lt := &lagTracker{r: r, sources: []*source{src}, committed: map[string]message.MessageID{}}
		return r, lr.add(ctx, lt)
	}
	refreshed := func(r *replica) func() (bool, string) {
		return func() (bool, string) {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.lag != nil, "lag not refreshed yet"
		}
	}
	clear := func(r *replica) {
		r.mu.Lock()
		r.lag = nil
		r.mu.Unlock()
	}
	a, removeA := track("lagrefresh-a")
	b, removeB := track("lagrefresh-b")
	defer removeB()
	waitfor.Until(t, 10*time.Second, "a refreshed", refreshed(a))
	waitfor.Until(t, 10*time.Second, "b refreshed", refreshed(b))

	removeA()
	clear(a)
	for range 3 { // b refreshed three more times: the refresher runs on
		clear(b)
		waitfor.Until(t, 10*time.Second, "b refreshed again", refreshed(b))
	}
	if ok, _ := refreshed(a)(); ok {
		t.Fatal("a primary's lag was refreshed after its tracker was removed")
	}
}

// countingWAL counts LastID questions.
type countingWAL struct {
	wal.WAL
	lastIDs int
}

func (w *countingWAL) LastID(ctx context.Context) (message.MessageID, error) {
	w.lastIDs++
	return w.WAL.LastID(ctx)
}

// TestLagRefresherAsksIdleSourcesLessOften: a primary is refreshed at its
// first tick, then — while it commits nothing — every idleLagTicks ticks
// only; a commit makes it due at the next tick.
func TestLagRefresherAsksIdleSourcesLessOften(t *testing.T) {
	op, err := wal.NewOpenerBuilder(memory.NewBuilder()).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	ctx := context.Background()
	const ch = "lagrefresh-idle"
	w, err := op.Open(ctx, &wal.OpenOption{Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cw := &countingWAL{WAL: w}
	defer metricSourceLag.DeleteLabelValues(ch, ch)
	lt := &lagTracker{r: &replica{id: ch, logger: hclog.NewNullLogger()}, sources: []*source{{channel: ch, log: cw}}, committed: map[string]message.MessageID{}}
	lr := newLagRefresher()
	remove := lr.add(ctx, lt)
	defer remove()

	tick := func(n int) {
		for range n {
			lr.refreshAll(ctx) // what run does at each tick
		}
	}
	tick(1)
	if cw.lastIDs != 1 {
		t.Fatalf("%d questions at the first tick, want 1", cw.lastIDs)
	}
	tick(idleLagTicks - 1)
	if cw.lastIDs != 1 {
		t.Fatalf("%d questions over %d idle ticks after the first, want still 1", cw.lastIDs, idleLagTicks-1)
	}
	tick(1)
	if cw.lastIDs != 2 {
		t.Fatalf("%d questions after %d idle ticks, want 2 (the backstop)", cw.lastIDs, idleLagTicks)
	}
	lt.commit(map[string]message.MessageID{ch: 0})
	tick(1)
	if cw.lastIDs != 3 {
		t.Fatalf("%d questions at the tick after a commit, want 3", cw.lastIDs)
	}
	tick(1)
	if cw.lastIDs != 3 {
		t.Fatalf("%d questions at the next tick without a commit, want still 3", cw.lastIDs)
	}
}
