package walimplstest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// The suite's own tests: it must fail a backend that breaks the async
// contract, and pass one that only reports out of call order.

// probe is a testing.TB that records failures instead of failing the real
// test; Fatal ends the calling goroutine, as it does on a real T.
type probe struct {
	testing.TB
	mu       sync.Mutex
	failures []string
}

func (p *probe) record(s string) {
	p.mu.Lock()
	p.failures = append(p.failures, s)
	p.mu.Unlock()
}
func (p *probe) Errorf(f string, a ...any) { p.record(fmt.Sprintf(f, a...)) }
func (p *probe) Error(a ...any)            { p.record(fmt.Sprint(a...)) }
func (p *probe) Fatalf(f string, a ...any) { p.record(fmt.Sprintf(f, a...)); runtime.Goexit() }
func (p *probe) Fatal(a ...any)            { p.record(fmt.Sprint(a...)); runtime.Goexit() }
func (p *probe) FailNow()                  { p.record("FailNow"); runtime.Goexit() }
func (p *probe) Fail()                     { p.record("Fail") }
func (p *probe) Failed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.failures) > 0
}

// runProbe runs one suite check against b and returns its failures.
func runProbe(t *testing.T, b walimpls.OpenerBuilderImpls, check func(testing.TB, walimpls.OpenerBuilderImpls)) []string {
	p := &probe{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(p, b)
	}()
	<-done
	return p.failures
}

// faulty wraps the memory backend, corrupting AppendAsync.
type faulty struct {
	*memory.Builder
	// corrupt replaces a WAL's AppendAsync; n counts its calls from 1.
	corrupt func(w *faultyWAL, n int64, ctx context.Context, msg message.MutableMessage, cb func(message.MessageID, error))
}

func (f *faulty) Build() (walimpls.OpenerImpls, error) {
	o, err := f.Builder.Build()
	return &faultyOpener{OpenerImpls: o, f: f}, err
}

type faultyOpener struct {
	walimpls.OpenerImpls
	f *faulty
}

func (o *faultyOpener) Open(ctx context.Context, opt *walimpls.OpenOption) (walimpls.WALImpls, error) {
	w, err := o.OpenerImpls.Open(ctx, opt)
	if err != nil {
		return nil, err
	}
	return &faultyWAL{WALImpls: w, inner: w.(walimpls.AsyncAppender), f: o.f}, nil
}

type faultyWAL struct {
	walimpls.WALImpls
	inner walimpls.AsyncAppender
	f     *faulty
	calls atomic.Int64
	mu    sync.Mutex
	held  *heldAppend
}

type heldAppend struct {
	ctx context.Context
	msg message.MutableMessage
	cb  func(message.MessageID, error)
}

func (w *faultyWAL) AppendAsync(ctx context.Context, msg message.MutableMessage, cb func(message.MessageID, error)) {
	w.f.corrupt(w, w.calls.Add(1), ctx, msg, cb)
}

func (w *faultyWAL) Append(ctx context.Context, msg message.MutableMessage) (message.MessageID, error) {
	return w.WALImpls.Append(ctx, msg)
}

// swapPairs stores every odd call after the even call that follows it.
func swapPairs(w *faultyWAL, n int64, ctx context.Context, msg message.MutableMessage, cb func(message.MessageID, error)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n%2 == 1 {
		w.held = &heldAppend{ctx, msg, cb}
		return
	}
	w.inner.AppendAsync(ctx, msg, cb)
	if h := w.held; h != nil {
		w.held = nil
		w.inner.AppendAsync(h.ctx, h.msg, h.cb)
	}
}

// dropOne never reports the 50th call (it is stored).
func dropOne(w *faultyWAL, n int64, ctx context.Context, msg message.MutableMessage, cb func(message.MessageID, error)) {
	if n == 50 {
		cb = func(message.MessageID, error) {}
	}
	w.inner.AppendAsync(ctx, msg, cb)
}

// doubleOne reports the 50th call twice.
func doubleOne(w *faultyWAL, n int64, ctx context.Context, msg message.MutableMessage, cb func(message.MessageID, error)) {
	if n == 50 {
		inner := cb
		cb = func(id message.MessageID, err error) { inner(id, err); inner(id, err) }
	}
	w.inner.AppendAsync(ctx, msg, cb)
}

// forgetFailure fails an append whose context ended without telling the
// backend, which then goes on storing the appends behind it.
func forgetFailure(w *faultyWAL, n int64, ctx context.Context, msg message.MutableMessage, cb func(message.MessageID, error)) {
	if err := ctx.Err(); err != nil {
		cb(0, err)
		return
	}
	w.inner.AppendAsync(ctx, msg, cb)
}

// holdReplies holds every reply back until n appends were stored, so the
// outcomes of a pipeline are still unreported while it is being sent.
func holdReplies(n int64) func(*memory.Builder) {
	return func(b *memory.Builder) {
		var stored atomic.Int64
		release := make(chan struct{})
		b.SetAppendHook(func(_ string, _ *message.MutableMessage, st memory.Stage) error {
			switch {
			case st == memory.BeforeStore && stored.Add(1) == n:
				close(release)
			case st == memory.AfterStore:
				<-release
			}
			return nil
		})
	}
}

func TestSuiteCatchesBrokenAsyncBackends(t *testing.T) {
	saved := callbackTimeout
	callbackTimeout = 2 * time.Second
	defer func() { callbackTimeout = saved }()
	checks := map[string]func(testing.TB, walimpls.OpenerBuilderImpls){
		"AsyncConcurrentPipelines":       testAsyncConcurrent,
		"AsyncFencedPipelineInCallOrder": testAsyncFencedOrder,
		"AsyncFailureStopsLaterAppends":  testAsyncFailureMidPipeline,
	}
	cases := []struct {
		name    string
		corrupt func(*faultyWAL, int64, context.Context, message.MutableMessage, func(message.MessageID, error))
		want    string   // words the failure must contain ("|" separates alternatives)
		checks  []string // the checks that must catch it
		setup   func(*memory.Builder)
	}{
		{"stores out of call order", swapPairs, "out of call order|never ran", []string{"AsyncConcurrentPipelines", "AsyncFencedPipelineInCallOrder"}, nil},
		{"drops a callback", dropOne, "never ran", []string{"AsyncConcurrentPipelines", "AsyncFencedPipelineInCallOrder", "AsyncFailureStopsLaterAppends"}, nil},
		{"reports a callback twice", doubleOne, "ran again", []string{"AsyncConcurrentPipelines", "AsyncFencedPipelineInCallOrder"}, nil},
		{"stores after a failure", forgetFailure, "earlier outcomes were unreported", []string{"AsyncFailureStopsLaterAppends"}, holdReplies(300)},
	}
	for _, tc := range cases {
		for _, name := range tc.checks {
			check := checks[name]
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				mem := memory.NewBuilder()
				if tc.setup != nil {
					tc.setup(mem)
				}
				failures := runProbe(t, &faulty{Builder: mem, corrupt: tc.corrupt}, check)
				if len(failures) == 0 {
					t.Fatalf("the suite passed a backend that %s", tc.name)
				}
				said := strings.Join(failures, "\n")
				if !slices.ContainsFunc(strings.Split(tc.want, "|"), func(w string) bool { return strings.Contains(said, w) }) {
					t.Fatalf("the suite failed the backend that %s, but not saying %q: %v", tc.name, tc.want, failures)
				}
			})
		}
	}
}

// TestSuitePassesShuffledReports: reporting outcomes out of call order is
// allowed (the adaptor restores it); the async checks must pass.
func TestSuitePassesShuffledReports(t *testing.T) {
	for name, check := range map[string]func(testing.TB, walimpls.OpenerBuilderImpls){
		"AsyncConcurrentPipelines":       testAsyncConcurrent,
		"AsyncFencedPipelineInCallOrder": testAsyncFencedOrder,
		"AsyncFailureStopsLaterAppends":  testAsyncFailureMidPipeline,
		"AdaptorCallbacksInCallOrder":    testAdaptorCallbackOrder,
	} {
		t.Run(name, func(t *testing.T) {
			b := memory.NewBuilder()
			b.ShuffleAcks(3)
			if failures := runProbe(t, b, check); len(failures) > 0 {
				t.Fatalf("the suite failed a correct backend: %v", failures)
			}
		})
	}
}
