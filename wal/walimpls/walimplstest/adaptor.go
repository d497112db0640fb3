package walimplstest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// The adaptor section: the backend under the wal adaptor, as callers use
// it. The adaptor restores call order, so callbacks run one at a time, in
// the order the appends were accepted, with ids increasing in that order;
// and a fence mid-pipeline ends in ErrFenced for every later append.

func adaptorOpener(t testing.TB, b walimpls.OpenerBuilderImpls) wal.Opener {
	t.Helper()
	op, err := wal.NewOpenerBuilder(b, wal.WithRetry(time.Millisecond, 50*time.Millisecond, 20)).Build()
	if err != nil {
		t.Fatalf("build adaptor over %s: %v", b.Name(), err)
	}
	return op
}

func adaptorOpen(t testing.TB, ctx context.Context, op wal.Opener, ch string, term uint64) wal.WAL {
	t.Helper()
	w, err := op.Open(ctx, &wal.OpenOption{Channel: ch, Term: term})
	if err != nil {
		t.Fatalf("adaptor Open %q term %d: %v", ch, term, err)
	}
	return w
}

// callbackLog records an adaptor WAL's callbacks in the order they ran.
type callbackLog struct {
	t       testing.TB
	name    string
	running atomic.Bool
	mu      sync.Mutex
	ids     []message.MessageID
	errs    []error
	tags    []int // which append each callback reported
	wg      sync.WaitGroup
}

func (l *callbackLog) cb(tag int) func(*wal.AppendResult, error) {
	l.wg.Add(1)
	return func(r *wal.AppendResult, err error) {
		if !l.running.CompareAndSwap(false, true) {
			l.t.Errorf("%s: callback of append %d ran concurrently with another", l.name, tag)
		}
		var id message.MessageID
		if r != nil {
			id = r.MessageID
		}
		l.mu.Lock()
		l.ids, l.errs, l.tags = append(l.ids, id), append(l.errs, err), append(l.tags, tag)
		l.mu.Unlock()
		l.running.Store(false)
		l.wg.Done()
	}
}

func (l *callbackLog) wait() {
	l.t.Helper()
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(callbackTimeout):
		l.mu.Lock()
		n := len(l.ids)
		l.mu.Unlock()
		l.t.Fatalf("%s: only %d callbacks ran within %v", l.name, n, callbackTimeout)
	}
}

// testAdaptorCallbackOrder: goroutines append to one WAL at once; each
// goroutine's appends are reported in its call order, all callbacks one at
// a time, ids increasing in callback order.
func testAdaptorCallbackOrder(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	op := adaptorOpener(t, b)
	defer op.Close()
	for _, term := range []uint64{0, 1} {
		w := adaptorOpen(t, ctx, op, fmt.Sprintf("recovery/conf-adaptor-order-%d", term), term)
		l := &callbackLog{t: t, name: fmt.Sprintf("term %d", term)}
		const goroutines, per = 4, 250
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < per; i++ {
					w.AppendAsync(ctx, payloadMsg(fmt.Sprintf("g%d-", g), i), l.cb(g*per+i))
				}
			}()
		}
		wg.Wait()
		l.wait()
		next := make([]int, goroutines)
		for k, err := range l.errs {
			if err != nil {
				t.Fatalf("term %d: append %d: %v", term, l.tags[k], err)
			}
			if k > 0 && l.ids[k] <= l.ids[k-1] {
				t.Fatalf("term %d: callback %d reported id %d after id %d: not in id order", term, k, l.ids[k], l.ids[k-1])
			}
			g, i := l.tags[k]/per, l.tags[k]%per
			if i != next[g] {
				t.Fatalf("term %d: goroutine %d's append %d reported before its append %d", term, g, i, next[g])
			}
			next[g]++
		}
		w.Close()
	}
}

// testAdaptorFencingMidPipeline: through the adaptor a fence mid-pipeline
// leaves a stored prefix and fails every later append with ErrFenced.
func testAdaptorFencingMidPipeline(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	const ch = "recovery/conf-adaptor-fence"
	op1, op2 := adaptorOpener(t, b), adaptorOpener(t, b)
	defer op1.Close()
	defer op2.Close()
	w1 := adaptorOpen(t, ctx, op1, ch, 1)
	defer w1.Close()
	l := &callbackLog{t: t, name: "term 1"}
	const n, fenceAt = 600, 300
	for i := 0; i < n; i++ {
		if i == fenceAt {
			w2 := adaptorOpen(t, ctx, op2, ch, 2)
			defer w2.Close()
		}
		w1.AppendAsync(ctx, payloadMsg("t1-", i), l.cb(i))
	}
	l.wait()
	fencedAt := -1
	for k, err := range l.errs {
		if l.tags[k] != k {
			t.Fatalf("callback %d reported append %d: out of call order", k, l.tags[k])
		}
		switch {
		case err == nil:
			if fencedAt >= 0 {
				t.Fatalf("append %d stored after append %d was fenced", k, fencedAt)
			}
		case errors.Is(err, wal.ErrFenced):
			if fencedAt < 0 {
				fencedAt = k
			}
		default:
			t.Fatalf("append %d: %v, want success or ErrFenced", k, err)
		}
	}
	if fencedAt < 0 || fencedAt > fenceAt {
		t.Fatalf("first fenced append %d; want one at or before %d", fencedAt, fenceAt)
	}
	if w1.IsAvailable() {
		t.Fatal("fenced WAL still available")
	}
}
