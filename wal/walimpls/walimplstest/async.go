package walimplstest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// The AsyncAppender section: pipelined appends, without waiting for each
// other, as the wal adaptor makes them. The contract checked (see
// walimpls.AsyncAppender): every call's callback runs exactly once, in any
// order; the ids of one goroutine's successful appends follow its call
// order; a fenced writer's stored appends are a prefix of its calls — after
// a failure nothing handed in while earlier outcomes are unreported is
// stored; a fence mid-pipeline fails the rest; Close with appends in flight
// still reports each of them.

// callbackTimeout bounds the wait for a pipeline's callbacks: a backend
// that drops one fails, it never hangs. A var so the suite's own tests can
// shorten it.
var callbackTimeout = 20 * time.Second

// asyncAppender returns w's AsyncAppender or skips the test.
func asyncAppender(t testing.TB, w walimpls.WALImpls) walimpls.AsyncAppender {
	t.Helper()
	a, ok := w.(walimpls.AsyncAppender)
	if !ok {
		t.Skipf("%s WALs do not implement walimpls.AsyncAppender", w.WALName())
	}
	return a
}

// outcome is one callback.
type outcome struct {
	id    message.MessageID
	err   error
	calls int // how often the callback ran
	// settledAfter is how many callbacks of the pipeline had run when
	// AppendAsync returned for this append: at least as many as when the
	// backend decided to store it.
	settledAfter int64
}

// pipeline issues appends and records their callbacks.
type pipeline struct {
	t       testing.TB
	name    string
	mu      sync.Mutex
	outs    []outcome
	settled atomic.Int64
	all     sync.WaitGroup
}

func newPipeline(t testing.TB, name string, n int) *pipeline {
	p := &pipeline{t: t, name: name, outs: make([]outcome, n)}
	p.all.Add(n)
	return p
}

// send hands append i to a.
func (p *pipeline) send(ctx context.Context, a walimpls.AsyncAppender, i int, msg message.MutableMessage) {
	defer func() {
		n := p.settled.Load()
		p.mu.Lock()
		p.outs[i].settledAfter = n
		p.mu.Unlock()
	}()
	a.AppendAsync(ctx, msg, func(id message.MessageID, err error) {
		p.mu.Lock()
		o := &p.outs[i]
		o.calls++
		first := o.calls == 1
		o.id, o.err = id, err
		p.mu.Unlock()
		if !first {
			p.t.Errorf("%s: callback of append %d ran again (id %d, err %v)", p.name, i, id, err)
			return
		}
		p.settled.Add(1)
		p.all.Done()
	})
}

// wait waits for every callback, failing on a stall.
func (p *pipeline) wait() []outcome {
	p.t.Helper()
	done := make(chan struct{})
	go func() { p.all.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(callbackTimeout):
		p.mu.Lock()
		var missing []int
		for i, o := range p.outs {
			if o.calls == 0 {
				missing = append(missing, i)
			}
		}
		p.mu.Unlock()
		p.t.Fatalf("%s: %d callbacks never ran within %v (appends %v...)", p.name, len(missing), callbackTimeout, missing[:min(len(missing), 10)])
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]outcome(nil), p.outs...)
}

// checkIDsFollowCalls fails when a later successful append got a lower id.
func checkIDsFollowCalls(t testing.TB, name string, outs []outcome) {
	t.Helper()
	var last message.MessageID
	lastAt := -1
	for i, o := range outs {
		if o.err != nil {
			continue
		}
		if o.id <= last {
			t.Fatalf("%s: append %d got id %d, not above append %d's id %d: stored out of call order", name, i, o.id, lastAt, last)
		}
		last, lastAt = o.id, i
	}
}

// checkReadBack reads the channel from the start and compares it with the
// successful appends (payload "<prefix><i>"): each exactly once, in id order.
func checkReadBack(t testing.TB, ctx context.Context, w walimpls.WALImpls, prefix string, outs []outcome, others int) {
	t.Helper()
	want := map[message.MessageID]string{}
	for i, o := range outs {
		if o.err == nil {
			want[o.id] = fmt.Sprintf("%s%d", prefix, i)
		}
	}
	got := receive(t, read(t, ctx, w, walimpls.DeliverAll()), len(want)+others)
	seen := 0
	for _, m := range got {
		p, ok := want[m.ID]
		if !ok {
			continue // another writer's message
		}
		if string(m.Payload) != p {
			t.Fatalf("id %d holds %q, want %q", m.ID, m.Payload, p)
		}
		seen++
	}
	if seen != len(want) {
		t.Fatalf("read back %d of the %d acknowledged appends", seen, len(want))
	}
}

func payloadMsg(prefix string, i int) message.MutableMessage {
	return message.MutableMessage{Key: fmt.Sprint(i), Payload: []byte(fmt.Sprintf("%s%d", prefix, i))}
}

// testAsyncConcurrent: several goroutines pipeline appends on one unfenced
// channel at once.
func testAsyncConcurrent(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-async/0000", 0)
	defer w.Close()
	a := asyncAppender(t, w)
	const goroutines, per = 4, 300
	ps := make([]*pipeline, goroutines)
	var wg sync.WaitGroup
	for g := range ps {
		ps[g] = newPipeline(t, fmt.Sprintf("goroutine %d", g), per)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				ps[g].send(ctx, a, i, payloadMsg(fmt.Sprintf("g%d-", g), i))
			}
		}()
	}
	wg.Wait()
	total := 0
	all := map[message.MessageID]bool{}
	for g, p := range ps {
		outs := p.wait()
		for i, o := range outs {
			if o.err != nil {
				t.Fatalf("goroutine %d append %d: %v", g, i, o.err)
			}
			if all[o.id] {
				t.Fatalf("goroutine %d append %d: id %d acknowledged twice", g, i, o.id)
			}
			all[o.id] = true
		}
		checkIDsFollowCalls(t, p.name, outs)
		total += len(outs)
	}
	got := receive(t, read(t, ctx, w, walimpls.DeliverAll()), total)
	for _, m := range got {
		if !all[m.ID] {
			t.Fatalf("read id %d that no callback reported", m.ID)
		}
	}
}

// testAsyncFencedOrder: a fenced writer pipelines; ids follow call order and
// everything is read back.
func testAsyncFencedOrder(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "recovery/conf-async-order", 1)
	defer w.Close()
	a := asyncAppender(t, w)
	const n = 1000
	p := newPipeline(t, "fenced writer", n)
	for i := 0; i < n; i++ {
		p.send(ctx, a, i, payloadMsg("f-", i))
	}
	outs := p.wait()
	for i, o := range outs {
		if o.err != nil {
			t.Fatalf("append %d: %v", i, o.err)
		}
	}
	checkIDsFollowCalls(t, p.name, outs)
	checkReadBack(t, ctx, w, "f-", outs, 0)
}

// testAsyncFencingMidPipeline: a higher term opens while a writer has
// appends in flight. What was stored is a prefix of the calls; every later
// append fails (fenced, or retryably), and a re-send is fenced.
func testAsyncFencingMidPipeline(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	const ch = "recovery/conf-async-fence"
	o1, o2 := build(t, b), build(t, b)
	defer o1.Close()
	defer o2.Close()
	w1 := open(t, ctx, o1, ch, 1)
	defer w1.Close()
	a := asyncAppender(t, w1)
	const n, fenceAt = 600, 300
	p := newPipeline(t, "term 1", n)
	var w2 walimpls.WALImpls
	for i := 0; i < n; i++ {
		if i == fenceAt {
			w2 = open(t, ctx, o2, ch, 2)
			defer w2.Close()
		}
		p.send(ctx, a, i, payloadMsg("t1-", i))
	}
	outs := p.wait()
	failedAt := -1
	for i, o := range outs {
		switch {
		case o.err == nil:
			if failedAt >= 0 {
				t.Fatalf("append %d stored (id %d) after append %d failed (%v): not a prefix", i, o.id, failedAt, outs[failedAt].err)
			}
		case errors.Is(o.err, walimpls.ErrFenced), walimpls.IsRetryable(o.err):
			if failedAt < 0 {
				failedAt = i
			}
		default:
			t.Fatalf("append %d: %v, want ErrFenced or a retryable error", i, o.err)
		}
	}
	if failedAt < 0 || failedAt > fenceAt {
		t.Fatalf("first failed append %d; want one at or before %d, where term 2 opened", failedAt, fenceAt)
	}
	checkIDsFollowCalls(t, p.name, outs)
	expectFenced(t, ctx, w1, "t1-resend")
	appendOne(t, ctx, w2, "t2-a")
	checkReadBack(t, ctx, w2, "t1-", outs, 1)
}

// testAsyncFailureMidPipeline: one append of a fenced writer's pipeline
// fails (its context ended before it was sent). No append handed in after it
// while earlier outcomes were unreported may be stored, and nothing is
// stored out of call order.
func testAsyncFailureMidPipeline(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "recovery/conf-async-fail", 1)
	defer w.Close()
	a := asyncAppender(t, w)
	dead, cancel := context.WithCancel(ctx)
	cancel()
	const n, failAt = 400, 200
	p := newPipeline(t, "fenced writer", n)
	for i := 0; i < n; i++ {
		c := ctx
		if i == failAt {
			c = dead
		}
		p.send(c, a, i, payloadMsg("m-", i))
	}
	outs := p.wait()
	if outs[failAt].err == nil {
		t.Fatalf("append %d with an ended context was stored (id %d)", failAt, outs[failAt].id)
	}
	// The first append stored after the failure restarts the pipeline: it
	// must have been handed in once every earlier outcome was reported
	// (with one outcome of slack: a backend may count an outcome as
	// reported just before its callback starts). Later ones pipeline again.
	for i := failAt + 1; i < n; i++ {
		o := outs[i]
		if o.err != nil {
			if !walimpls.IsRetryable(o.err) {
				t.Fatalf("append %d after the failure: %v, want success or a retryable error", i, o.err)
			}
			continue
		}
		if o.settledAfter < int64(i)-1 {
			t.Fatalf("append %d stored (id %d) after append %d failed, although handed in while %d earlier outcomes were unreported",
				i, o.id, failAt, int64(i)-o.settledAfter)
		}
		break
	}
	checkIDsFollowCalls(t, p.name, outs)
	checkReadBack(t, ctx, w, "m-", outs, 0)
	// The writer carries on once every outcome is in.
	appendOne(t, ctx, w, "after")
}

// testAsyncCloseInFlight: Close while appends are in flight still reports
// every one of them, once; the stored ones are read back.
func testAsyncCloseInFlight(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	const ch = "recovery/conf-async-close"
	o := build(t, b)
	defer o.Close()
	for _, term := range []uint64{0, 1} {
		name := fmt.Sprintf("%s-%d", ch, term)
		w := open(t, ctx, o, name, term)
		a := asyncAppender(t, w)
		const n = 500
		p := newPipeline(t, fmt.Sprintf("term %d", term), n)
		for i := 0; i < n; i++ {
			p.send(ctx, a, i, payloadMsg("c-", i))
		}
		closed := make(chan struct{})
		go func() { w.Close(); close(closed) }()
		outs := p.wait()
		select {
		case <-closed:
		case <-time.After(callbackTimeout):
			t.Fatalf("term %d: Close did not return", term)
		}
		checkIDsFollowCalls(t, p.name, outs)
		if term > 0 {
			for i := 1; i < n; i++ {
				if outs[i].err == nil && outs[i-1].err != nil {
					t.Fatalf("term %d: append %d stored after append %d failed: %v", term, i, i-1, outs[i-1].err)
				}
			}
		}
		r := open(t, ctx, o, name, 0)
		checkReadBack(t, ctx, r, "c-", outs, 0)
		r.Close()
	}
}
