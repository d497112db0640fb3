package shard

import (
	"context"
	"time"
)

// Chain workers: each chain (an epoch's chain on one output partition) is
// published by a goroutine of its own, from a bounded queue of the groups'
// shares, in order. The drainer dispatches a group to the chains it has
// outputs on and waits for it — while every partition keeps up, one group
// at a time, as fast as the slowest — but no longer than chainStuckAfter:
// then it goes on with the next groups, so a partition whose publishes
// stall (its stream without a leader, its retries running) holds up only
// its own chain, up to chainQueue groups behind the others. Every txn up to
// a group's last is published once the group and every group before it
// are out on all their chains (the watermark the outbox records).
const (
	chainQueue      = 16
	chainStuckAfter = time.Second
)

// chainWorker is the goroutine publishing one chain.
type chainWorker struct {
	c  *outChan
	in chan chainWork
}

// chainWork is a group's share for one chain: its txns' outputs there.
type chainWork struct {
	txns []*outTxn
	g    *inflightGroup
}

// inflightGroup is a group dispatched to its chains. remaining is guarded
// by drainer.gmu; done is closed when it reaches 0.
type inflightGroup struct {
	last      uint64 // the group's last txn
	count     int    // its messages (the published metric)
	remaining int
	done      chan struct{}
}

// dispatch hands group's outputs to the workers of their chains (opening
// them as needed) and returns the group in flight (nil: ctx ended, or the
// group was empty). An error is a chain that failed to open, or a worker's
// failure.
func (d *drainer) dispatch(ctx context.Context, group []*outTxn) (*inflightGroup, error) {
	if len(group) == 0 {
		return nil, nil
	}
	order, by, count := d.split(group)
	g := &inflightGroup{last: group[len(group)-1].txn, count: count, remaining: len(order), done: make(chan struct{})}
	workers := make([]*chainWorker, len(order))
	for i, k := range order {
		w, err := d.worker(ctx, k)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil
			}
			return nil, err
		}
		workers[i] = w
	}
	d.gmu.Lock()
	d.inflight = append(d.inflight, g)
	d.gmu.Unlock()
	if len(order) == 0 {
		d.settle(g, nil)
		return g, nil
	}
	for i, k := range order {
		select {
		case workers[i].in <- chainWork{txns: by[k], g: g}:
		case <-ctx.Done():
			return nil, nil
		case <-d.failed:
			return nil, d.werr
		}
	}
	return g, nil
}

// worker is k's chain worker, started (and its chain opened) on first use.
// Dispatching goroutine only.
func (d *drainer) worker(ctx context.Context, k chanKey) (*chainWorker, error) {
	if w, ok := d.workers[k]; ok {
		return w, nil
	}
	c, err := d.channel(ctx, k)
	if err != nil {
		return nil, err
	}
	if d.wcancel == nil {
		d.wctx, d.wcancel = context.WithCancel(ctx)
	}
	w := &chainWorker{c: c, in: make(chan chainWork, chainQueue)}
	d.workers[k] = w
	d.wg.Add(1)
	go d.runWorker(w) // owned by the drainer: stopped by shutdown
	return w, nil
}

func (d *drainer) runWorker(w *chainWorker) {
	defer d.wg.Done()
	for work := range w.in {
		if err := d.publishChannel(d.wctx, w.c, work.txns); err != nil {
			if d.wctx.Err() == nil {
				d.fail(err)
			}
			return
		}
		d.settle(work.g, w.c)
	}
}

// fail records a worker's error (the first) and wakes the dispatcher.
func (d *drainer) fail(err error) {
	d.failOnce.Do(func() {
		d.werr = err
		close(d.failed)
	})
}

// settle notes that c (nil: none) published its share of g, and moves the
// published watermark over the groups out on every chain, in order.
func (d *drainer) settle(g *inflightGroup, c *outChan) {
	if c != nil {
		d.noteMarks([]*outChan{c})
	}
	d.gmu.Lock()
	defer d.gmu.Unlock()
	if c != nil {
		g.remaining--
	}
	if g.remaining == 0 {
		close(g.done)
	}
	for len(d.inflight) > 0 && d.inflight[0].remaining == 0 {
		out := d.inflight[0]
		d.inflight = d.inflight[1:]
		d.markPublished(out.last)
		if out.count > 0 {
			metricOutputsPublished.WithLabelValues(d.shard).Add(float64(out.count))
		}
	}
}

// await waits until g is out on all its chains, ctx ends (nil), a worker
// fails (its error) or, with stuck > 0, stuck passed (nil: the caller goes
// on while g's slow chains catch up).
func (d *drainer) await(ctx context.Context, g *inflightGroup, stuck time.Duration) error {
	select {
	case <-g.done:
		return nil
	default:
	}
	var timeout <-chan time.Time
	if stuck > 0 {
		t := d.clock.NewTimer(stuck)
		defer t.Stop()
		timeout = t.C()
	}
	select {
	case <-g.done:
	case <-timeout:
	case <-ctx.Done():
	case <-d.failed:
		return d.werr
	}
	return nil
}

// awaitAll waits until every group dispatched is out (or ctx ends, or a
// worker fails).
func (d *drainer) awaitAll(ctx context.Context) error {
	d.gmu.Lock()
	gs := append([]*inflightGroup(nil), d.inflight...)
	d.gmu.Unlock()
	for _, g := range gs {
		if err := d.await(ctx, g, 0); err != nil {
			return err
		}
	}
	return nil
}

// publish publishes a group of committed transactions' outputs, in txn
// order, and returns once they are all out, ctx ended (nil: the next
// primary finishes), or on a permanent failure (an error: the shard
// fails).
func (d *drainer) publish(ctx context.Context, group []*outTxn) error {
	g, err := d.dispatch(ctx, group)
	if err != nil || g == nil {
		return err
	}
	return d.await(ctx, g, 0)
}

// shutdown stops the chain workers and closes the chains; no chain opens
// after it. The drainer's run ends with it; a test that publishes without
// run calls it.
func (d *drainer) shutdown() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	for _, w := range d.workers {
		close(w.in)
	}
	if d.wcancel != nil {
		d.wcancel()
	}
	d.wg.Wait()
	d.workers = map[chanKey]*chainWorker{}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.chans {
		c.w.Close()
	}
	d.chans = map[chanKey]*outChan{}
}
