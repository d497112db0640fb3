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
