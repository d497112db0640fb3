package wal_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 10 * time.Second

var errTransient = errors.New("injected transient failure")

// env is an adaptor over a fresh memory backend.
type env struct {
	mem    *memory.Builder
	opener wal.Opener
}

// newEnv builds the adaptor over a memory backend; shuffled makes the
// backend report outcomes out of call order (the adaptor must restore it).
func newEnv(t *testing.T, shuffled bool, opts ...wal.Option) *env {
	t.Helper()
	mem := memory.NewBuilder()
	if shuffled {
		mem.ShuffleAcks(uint64(time.Now().UnixNano()) | 1)
	}
	opts = append([]wal.Option{wal.WithRetry(time.Millisecond, 5*time.Millisecond, 10)}, opts...)
	op, err := wal.NewOpenerBuilder(mem, opts...).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	return &env{mem: mem, opener: op}
}

func (e *env) open(t *testing.T, ch string, term uint64) wal.WAL {
	t.Helper()
	w, err := e.opener.Open(context.Background(), &wal.OpenOption{Channel: ch, Term: term})
	if err != nil {
		t.Fatalf("open %q: %v", ch, err)
	}
	t.Cleanup(w.Close)
	return w
}

func msg(s string) message.MutableMessage {
	return message.MutableMessage{Key: "k" + s, Payload: []byte(s), Properties: map[string]string{"v": s}}
}

// readN reads n messages from a Chan scanner, failing on a stop or stall.
func readN(t *testing.T, s wal.Scanner, n int) []message.ImmutableMessage {
	t.Helper()
	var out []message.ImmutableMessage
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(out) < n {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				t.Fatalf("scanner stopped after %d of %d: %v", len(out), n, s.Error())
			}
			out = append(out, m)
		case <-timer.C:
			t.Fatalf("stalled after %d of %d messages", len(out), n)
		}
	}
	return out
}

func readAll(t *testing.T, w wal.WAL) []message.ImmutableMessage {
	t.Helper()
	ctx := context.Background()
	last, err := w.LastID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := w.Read(ctx, wal.ReadOption{Name: "test", DeliverPolicy: wal.DeliverAll()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []message.ImmutableMessage
	for len(out) == 0 || out[len(out)-1].ID < last {
		if last == 0 {
			return nil
		}
		out = append(out, readN(t, s, 1)...)
	}
	return out
}

func payloads(ms []message.ImmutableMessage) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Payload)
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// hookCounter counts BeforeStore calls and fails the first `fail` with err.
type hookCounter struct {
	calls atomic.Int64
	fail  int64
	err   error
}

func (h *hookCounter) hook(_ string, _ *message.MutableMessage, st memory.Stage) error {
	if st != memory.BeforeStore {
		return nil
	}
	if n := h.calls.Add(1); n <= h.fail {
		return h.err
	}
	return nil
}

func TestTransientErrorRetried(t *testing.T) {
	for _, shuffled := range []bool{false, true} {
		t.Run(fmt.Sprintf("shuffled=%v", shuffled), func(t *testing.T) {
			e := newEnv(t, shuffled)
			h := &hookCounter{fail: 2, err: errTransient}
			e.mem.SetAppendHook(h.hook)
			w := e.open(t, "t/0000", 0)
			r, err := w.Append(context.Background(), msg("a"))
			if err != nil {
				t.Fatalf("append with 2 transient failures: %v", err)
			}
			if got := h.calls.Load(); got != 3 {
				t.Fatalf("backend attempts = %d, want 3", got)
			}
			got := readAll(t, w)
			if len(got) != 1 || got[0].ID != r.MessageID || string(got[0].Payload) != "a" {
				t.Fatalf("read back %v, want exactly one message id %d", payloads(got), r.MessageID)
			}
			if !w.IsAvailable() {
				t.Fatal("WAL unavailable after a retried transient error")
			}
		})
	}
}

func TestRetryGivesUpAfterAttempts(t *testing.T) {
	e := newEnv(t, false, wal.WithRetry(time.Millisecond, 2*time.Millisecond, 3))
	h := &hookCounter{fail: 1 << 40, err: errTransient}
	e.mem.SetAppendHook(h.hook)
	w := e.open(t, "t/0000", 0)
	_, err := w.Append(context.Background(), msg("a"))
	if !errors.Is(err, errTransient) {
		t.Fatalf("error %v does not wrap the backend error", err)
	}
	if got := h.calls.Load(); got != 3 {
		t.Fatalf("attempts = %d, want 3", got)
	}
	if !w.IsAvailable() {
		t.Fatal("a transient error made the WAL unavailable")
	}
}

func TestPermanentErrorNotRetried(t *testing.T) {
	e := newEnv(t, false)
	h := &hookCounter{fail: 1 << 40, err: walimpls.Permanent(errors.New("too large"))}
	e.mem.SetAppendHook(h.hook)
	w := e.open(t, "t/0000", 0)
	if _, err := w.Append(context.Background(), msg("a")); err == nil {
		t.Fatal("append succeeded despite a permanent error")
	}
	if got := h.calls.Load(); got != 1 {
		t.Fatalf("attempts = %d, want 1", got)
	}
}

func TestFencedNotRetried(t *testing.T) {
	for _, shuffled := range []bool{false, true} {
		t.Run(fmt.Sprintf("shuffled=%v", shuffled), func(t *testing.T) {
			e := newEnv(t, shuffled)
			ctx := context.Background()
			w1 := e.open(t, "recovery/s", 1)
			if _, err := w1.Append(ctx, msg("a")); err != nil {
				t.Fatal(err)
			}
			h := &hookCounter{}
			e.mem.SetAppendHook(h.hook)
			w2 := e.open(t, "recovery/s", 2)
			_, err := w1.Append(ctx, msg("b"))
			if !errors.Is(err, wal.ErrFenced) {
				t.Fatalf("append after fencing: %v, want ErrFenced", err)
			}
			if got := h.calls.Load(); got != 1 {
				t.Fatalf("backend attempts for a fenced append = %d, want 1", got)
			}
			select {
			case <-w1.Available():
			default:
				t.Fatal("Available not closed after ErrFenced")
			}
			if w1.IsAvailable() {
				t.Fatal("IsAvailable true after ErrFenced")
			}
			// Later appends fail at once, without reaching the backend.
			done := make(chan error, 1)
			w1.AppendAsync(ctx, msg("c"), func(_ *wal.AppendResult, err error) { done <- err })
			if err := <-done; !errors.Is(err, wal.ErrFenced) {
				t.Fatalf("async append after fencing: %v, want ErrFenced", err)
			}
			if got := h.calls.Load(); got != 1 {
				t.Fatalf("backend attempts after fencing = %d, want 1", got)
			}
			if _, err := w2.Append(ctx, msg("d")); err != nil {
				t.Fatalf("append of the new writer: %v", err)
			}
			if got := payloads(readAll(t, w2)); !equal(got, []string{"a", "d"}) {
				t.Fatalf("log = %v, want [a d]", got)
			}
			if !w2.IsAvailable() {
				t.Fatal("new writer unavailable")
			}
		})
	}
}

func TestContextCancelNotRetried(t *testing.T) {
	e := newEnv(t, false, wal.WithRetry(time.Millisecond, time.Millisecond, 0))
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int64
	e.mem.SetAppendHook(func(_ string, _ *message.MutableMessage, st memory.Stage) error {
		if st == memory.BeforeStore {
			calls.Add(1)
			cancel()
			return errTransient
		}
		return nil
	})
	w := e.open(t, "t/0000", 0)
	_, err := w.Append(ctx, msg("a"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("attempts = %d, want 1", got)
	}
	if !w.IsAvailable() {
		t.Fatal("a cancelled append made the WAL unavailable")
	}
}

func TestContextDeadlineStopsRetrying(t *testing.T) {
	// Unlimited attempts: only the deadline ends the retries. The third
	// attempt outlives the deadline; no fourth may follow.
	e := newEnv(t, false, wal.WithRetry(time.Millisecond, 2*time.Millisecond, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var calls atomic.Int64
	e.mem.SetAppendHook(func(_ string, _ *message.MutableMessage, st memory.Stage) error {
		if st == memory.BeforeStore && calls.Add(1) == 3 {
			<-ctx.Done()
		}
		return errTransient
	})
	w := e.open(t, "t/0000", 0)
	_, err := w.Append(ctx, msg("a"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want DeadlineExceeded", err)
	}
	// Append returns when ctx ends; the dispatcher finishes the item on its
	// own, and Close waits for it.
	w.Close()
	if got := calls.Load(); got != 3 {
		t.Fatalf("attempts = %d, want 3 (2 retries, none after the deadline)", got)
	}
}

// TestAsyncOrder: appends from one goroutine are stored and reported in call
// order even with random backend delays, on both dispatch paths.
func TestAsyncOrder(t *testing.T) {
	for _, shuffled := range []bool{false, true} {
		t.Run(fmt.Sprintf("shuffled=%v", shuffled), func(t *testing.T) {
			e := newEnv(t, shuffled)
			var n atomic.Int64
			e.mem.SetAppendHook(func(_ string, _ *message.MutableMessage, st memory.Stage) error {
				if st == memory.BeforeStore && n.Add(1)%7 == 0 {
					time.Sleep(time.Millisecond) // a slow backend, not synchronisation
				}
				return nil
			})
			w := e.open(t, "t/0000", 0)
			const total = 300
			var mu sync.Mutex
			var order []int
			var ids []message.MessageID
			var wg sync.WaitGroup
			wg.Add(total)
			for i := 0; i < total; i++ {
				w.AppendAsync(context.Background(), msg(strconv.Itoa(i)), func(r *wal.AppendResult, err error) {
					defer wg.Done()
					if err != nil {
						t.Errorf("append %d: %v", i, err)
						return
					}
					mu.Lock()
					order = append(order, i)
					ids = append(ids, r.MessageID)
					mu.Unlock()
				})
			}
			wg.Wait()
			for i := range order {
				if order[i] != i {
					t.Fatalf("callback %d reported append %d: callbacks out of call order", i, order[i])
				}
				if i > 0 && ids[i] <= ids[i-1] {
					t.Fatalf("append %d got id %d after %d", i, ids[i], ids[i-1])
				}
			}
			got := readAll(t, w)
			if len(got) != total {
				t.Fatalf("read %d messages, want %d", len(got), total)
			}
			for i, m := range got {
				if string(m.Payload) != strconv.Itoa(i) || m.ID != ids[i] {
					t.Fatalf("position %d: id %d payload %q, want id %d payload %d", i, m.ID, m.Payload, ids[i], i)
				}
			}
		})
	}
}

// TestPipelinedTransientFailureRetriedInOrder: every append in flight fails
// transiently; nothing was stored, so all are retried in call order.
func TestPipelinedTransientFailureRetriedInOrder(t *testing.T) {
	e := newEnv(t, true)
	h := &hookCounter{fail: 5, err: errTransient}
	e.mem.SetAppendHook(h.hook)
	w := e.open(t, "t/0000", 0)
	const total = 5
	errs := make([]error, total)
	var wg sync.WaitGroup
	wg.Add(total)
	for i := 0; i < total; i++ {
		w.AppendAsync(context.Background(), msg(strconv.Itoa(i)), func(_ *wal.AppendResult, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if got := payloads(readAll(t, w)); !equal(got, []string{"0", "1", "2", "3", "4"}) {
		t.Fatalf("log = %v, want call order", got)
	}
}

// TestPipelinedFailureBeforeStoredNotRetried: on a term-0 WAL, when a later
// append was already stored, the failed earlier one is reported, not stored
// out of order. The acknowledgements are held (behind a first message whose
// acknowledgement waits on gate) until every append is handed in, so the
// later appends are stored before the adaptor learns of the failure; without
// the gate the failure may arrive first, and then retrying it is right.
func TestPipelinedFailureBeforeStoredNotRetried(t *testing.T) {
	e := newEnv(t, false) // acknowledgements in call order: the gate's first
	gate := make(chan struct{})
	var failed atomic.Bool
	e.mem.SetAppendHook(func(_ string, m *message.MutableMessage, st memory.Stage) error {
		switch {
		case st == memory.AfterStore && string(m.Payload) == "gate":
			<-gate
		case st == memory.BeforeStore && string(m.Payload) == "0" && failed.CompareAndSwap(false, true):
			return errTransient // the first attempt fails, unstored; the others are stored
		}
		return nil
	})
	w := e.open(t, "t/0000", 0)
	const total = 4
	errs := make([]error, total+1)
	var wg sync.WaitGroup
	wg.Add(total + 1)
	for i, p := range []string{"gate", "0", "1", "2", "3"} {
		w.AppendAsync(context.Background(), msg(p), func(_ *wal.AppendResult, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	close(gate)
	wg.Wait()
	if errs[1] == nil || !errors.Is(errs[1], errTransient) {
		t.Fatalf("append 0: error %v, want the transient failure reported", errs[1])
	}
	for i, err := range errs {
		if i != 1 && err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if got := payloads(readAll(t, w)); !equal(got, []string{"gate", "1", "2", "3"}) {
		t.Fatalf("log = %v, want [gate 1 2 3] (0 must not be stored after them)", got)
	}
}

func TestCloseWaitsForAsyncAppends(t *testing.T) {
	for _, shuffled := range []bool{false, true} {
		t.Run(fmt.Sprintf("shuffled=%v", shuffled), func(t *testing.T) {
			e := newEnv(t, shuffled)
			release := make(chan struct{})
			e.mem.SetAppendHook(func(_ string, _ *message.MutableMessage, st memory.Stage) error {
				if st == memory.AfterStore {
					<-release // stored, reply held back
				}
				return nil
			})
			w := e.open(t, "t/0000", 0)
			var done atomic.Int64
			for i := 0; i < 5; i++ {
				w.AppendAsync(context.Background(), msg(strconv.Itoa(i)), func(_ *wal.AppendResult, err error) {
					if err != nil {
						t.Errorf("append %d: %v", i, err)
					}
					done.Add(1)
				})
			}
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				w.Close()
			}()
			select {
			case <-w.Available():
			case <-time.After(wait):
				t.Fatal("Available not closed by Close")
			}
			close(release)
			select {
			case <-closed:
			case <-time.After(wait):
				t.Fatal("Close did not return")
			}
			if got := done.Load(); got != 5 {
				t.Fatalf("Close returned with %d of 5 callbacks done", got)
			}
			if _, err := w.Append(context.Background(), msg("late")); !errors.Is(err, wal.ErrClosed) {
				t.Fatalf("append after Close: %v, want ErrClosed", err)
			}
			if _, err := w.Read(context.Background(), wal.ReadOption{}); !errors.Is(err, wal.ErrClosed) {
				t.Fatalf("read after Close: %v, want ErrClosed", err)
			}
		})
	}
}

func TestCloseCutsRetryShort(t *testing.T) {
	e := newEnv(t, false, wal.WithRetry(time.Hour, time.Hour, 0))
	h := &hookCounter{fail: 1 << 40, err: errTransient}
	e.mem.SetAppendHook(h.hook)
	w := e.open(t, "t/0000", 0)
	res := make(chan error, 1)
	w.AppendAsync(context.Background(), msg("a"), func(_ *wal.AppendResult, err error) { res <- err })
	waitfor.Until(t, wait, "the first append attempt", func() (bool, string) { return h.calls.Load() > 0, "" })
	w.Close()
	if err := <-res; !errors.Is(err, wal.ErrClosed) {
		t.Fatalf("append retrying during Close: %v, want ErrClosed", err)
	}
}

func TestMessageFilter(t *testing.T) {
	e := newEnv(t, false)
	w := e.open(t, "t/0000", 0)
	ctx := context.Background()
	s, err := w.Read(ctx, wal.ReadOption{Name: "odd", DeliverPolicy: wal.DeliverAll(), MessageFilter: []wal.MessageFilter{
		func(m *message.ImmutableMessage) bool { n, _ := strconv.Atoi(string(m.Payload)); return n%2 == 1 },
		func(m *message.ImmutableMessage) bool { return string(m.Payload) != "5" },
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 10; i++ {
		if _, err := w.Append(ctx, msg(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if got := payloads(readN(t, s, 4)); !equal(got, []string{"1", "3", "7", "9"}) {
		t.Fatalf("filtered = %v, want [1 3 7 9]", got)
	}
}

// recordingHandler delivers to a slice, checking the Handle protocol.
type recordingHandler struct {
	t      *testing.T
	mu     sync.Mutex
	got    []string
	closed int
	after  bool // Handle called after Close
}

func (h *recordingHandler) Handle(p wal.HandleParam) wal.HandleResult {
	h.mu.Lock()
	if h.closed > 0 {
		h.after = true
	}
	h.mu.Unlock()
	if p.Message != nil {
		if p.Upstream != nil {
			h.t.Errorf("Handle got both Message and Upstream")
		}
		h.mu.Lock()
		h.got = append(h.got, string(p.Message.Payload))
		h.mu.Unlock()
		return wal.HandleResult{MessageHandled: true}
	}
	select {
	case <-p.Ctx.Done():
		return wal.HandleResult{Error: p.Ctx.Err()}
	case m, ok := <-p.Upstream:
		if !ok {
			return wal.HandleResult{Error: wal.ErrUpstreamClosed}
		}
		return wal.HandleResult{Incoming: &m}
	}
}

func (h *recordingHandler) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed++
}

func (h *recordingHandler) snapshot() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got...)
}

func TestMessageHandler(t *testing.T) {
	e := newEnv(t, false)
	w := e.open(t, "t/0000", 0)
	ctx := context.Background()
	var ids []message.MessageID
	for i := 0; i < 5; i++ {
		r, err := w.Append(ctx, msg(strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.MessageID)
	}
	h := &recordingHandler{t: t}
	s, err := w.Read(ctx, wal.ReadOption{Name: "h", DeliverPolicy: wal.DeliverStartAfter(ids[2]), MesasgeHandler: h,
		MessageFilter: []wal.MessageFilter{func(m *message.ImmutableMessage) bool { return string(m.Payload) != "3" }}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Chan() != nil {
		t.Fatal("Chan not nil with a MessageHandler")
	}
	waitfor.Until(t, wait, "the handler to get a message", func() (bool, string) { return len(h.snapshot()) > 0, "" })
	if got := h.snapshot(); !equal(got, []string{"4"}) {
		t.Fatalf("handled %v, want [4]", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(s.Error(), wal.ErrScannerClosed) {
		t.Fatalf("Error after Close = %v, want ErrScannerClosed", s.Error())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed != 1 || h.after {
		t.Fatalf("handler closed %d times, Handle after Close %v; want once, false", h.closed, h.after)
	}
}

// failingHandler stops the scanner with its own error.
type failingHandler struct{ err error }

func (h failingHandler) Handle(p wal.HandleParam) wal.HandleResult {
	if p.Message != nil {
		return wal.HandleResult{Error: h.err}
	}
	select {
	case <-p.Ctx.Done():
		return wal.HandleResult{Error: p.Ctx.Err()}
	case m, ok := <-p.Upstream:
		if !ok {
			return wal.HandleResult{Error: wal.ErrUpstreamClosed}
		}
		return wal.HandleResult{Incoming: &m}
	}
}
func (failingHandler) Close() {}

func TestHandlerErrorStopsScanner(t *testing.T) {
	e := newEnv(t, false)
	w := e.open(t, "t/0000", 0)
	ctx := context.Background()
	if _, err := w.Append(ctx, msg("x")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("apply failed")
	s, err := w.Read(ctx, wal.ReadOption{DeliverPolicy: wal.DeliverAll(), MesasgeHandler: failingHandler{boom}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(wait):
		t.Fatal("scanner did not stop on the handler's error")
	}
	if !errors.Is(s.Error(), boom) {
		t.Fatalf("Error = %v, want the handler's error", s.Error())
	}
	_ = s.Close()
	if !errors.Is(s.Error(), boom) {
		t.Fatalf("Close after the stop changed Error to %v", s.Error())
	}
}

func TestScannerStopsWithReadContext(t *testing.T) {
	e := newEnv(t, false)
	w := e.open(t, "t/0000", 0)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := w.Read(ctx, wal.ReadOption{DeliverPolicy: wal.DeliverLatest()})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-s.Done():
	case <-time.After(wait):
		t.Fatal("scanner did not stop when its ctx ended")
	}
	if !errors.Is(s.Error(), context.Canceled) {
		t.Fatalf("Error = %v, want context.Canceled", s.Error())
	}
	if _, ok := <-s.Chan(); ok {
		t.Fatal("Chan not closed after stop")
	}
}

func TestWALCloseStopsScanners(t *testing.T) {
	e := newEnv(t, false)
	w := e.open(t, "t/0000", 0)
	s, err := w.Read(context.Background(), wal.ReadOption{DeliverPolicy: wal.DeliverAll()})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	select {
	case <-s.Done():
	case <-time.After(wait):
		t.Fatal("scanner not stopped by WAL Close")
	}
	if !errors.Is(s.Error(), wal.ErrClosed) {
		t.Fatalf("Error = %v, want ErrClosed", s.Error())
	}
}

func TestTruncatedReadSurfaces(t *testing.T) {
	e := newEnv(t, false)
	w := e.open(t, "recovery/x", 0)
	ctx := context.Background()
	var ids []message.MessageID
	for i := 0; i < 5; i++ {
		r, err := w.Append(ctx, msg(strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.MessageID)
	}
	if err := w.Truncate(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	s, err := w.Read(ctx, wal.ReadOption{DeliverPolicy: wal.DeliverStartFrom(ids[1])})
	if err == nil {
		defer s.Close()
		select {
		case m, ok := <-s.Chan():
			if ok {
				t.Fatalf("delivered %d from a truncated position", m.ID)
			}
		case <-time.After(wait):
			t.Fatal("stalled at a truncated position")
		}
		<-s.Done()
		err = s.Error()
	}
	if !errors.Is(err, wal.ErrTruncated) {
		t.Fatalf("read from truncated position: %v, want ErrTruncated", err)
	}
	if got := payloads(readAll(t, w)); !equal(got, []string{"3", "4"}) {
		t.Fatalf("after Truncate: %v, want [3 4]", got)
	}
}

func TestOpenErrors(t *testing.T) {
	e := newEnv(t, false)
	if _, err := e.opener.Open(context.Background(), nil); err == nil {
		t.Fatal("Open(nil) succeeded")
	}
	if _, err := e.opener.Open(context.Background(), &wal.OpenOption{}); err == nil {
		t.Fatal("Open with an empty channel succeeded")
	}
	e.opener.Close()
	if _, err := e.opener.Open(context.Background(), &wal.OpenOption{Channel: "t/0000"}); !errors.Is(err, wal.ErrClosed) {
		t.Fatalf("Open after Close: %v, want ErrClosed", err)
	}
}

// TestConcurrentAppendersReadBack: many goroutines mixing Append and
// AppendAsync; each goroutine's messages are stored in its call order.
func TestConcurrentAppendersReadBack(t *testing.T) {
	for _, shuffled := range []bool{false, true} {
		t.Run(fmt.Sprintf("shuffled=%v", shuffled), func(t *testing.T) {
			e := newEnv(t, shuffled)
			w := e.open(t, "t/0000", 0)
			const goroutines, per = 4, 100
			var wg sync.WaitGroup
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var inner sync.WaitGroup
					for i := 0; i < per; i++ {
						m := msg(fmt.Sprintf("%d-%d", g, i))
						if i%3 == 0 {
							if _, err := w.Append(context.Background(), m); err != nil {
								t.Errorf("append: %v", err)
							}
							continue
						}
						inner.Add(1)
						w.AppendAsync(context.Background(), m, func(_ *wal.AppendResult, err error) {
							defer inner.Done()
							if err != nil {
								t.Errorf("async append: %v", err)
							}
						})
					}
					inner.Wait()
				}()
			}
			wg.Wait()
			got := readAll(t, w)
			if len(got) != goroutines*per {
				t.Fatalf("read %d, want %d", len(got), goroutines*per)
			}
			next := make([]int, goroutines)
			for _, m := range got {
				var g, i int
				if _, err := fmt.Sscanf(string(m.Payload), "%d-%d", &g, &i); err != nil {
					t.Fatal(err)
				}
				if i != next[g] {
					t.Fatalf("goroutine %d: message %d stored before %d", g, i, next[g])
				}
				next[g]++
			}
		})
	}
}

func TestOpenerCloseClosesWALs(t *testing.T) {
	e := newEnv(t, false)
	w := e.open(t, "t/0000", 0)
	s, err := w.Read(context.Background(), wal.ReadOption{DeliverPolicy: wal.DeliverLatest()})
	if err != nil {
		t.Fatal(err)
	}
	e.opener.Close()
	if w.IsAvailable() {
		t.Fatal("WAL still available after its opener closed")
	}
	select {
	case <-s.Done():
	case <-time.After(wait):
		t.Fatal("scanner still running after the opener closed")
	}
}

// TestPipelinedAppendsHeldDuringRecovery: appends made while a failed window
// is being retried wait, and are stored after the retried ones, in order.
func TestPipelinedAppendsHeldDuringRecovery(t *testing.T) {
	e := newEnv(t, true)
	inRetry := make(chan struct{})
	gate := make(chan struct{})
	var calls atomic.Int64
	e.mem.SetAppendHook(func(_ string, _ *message.MutableMessage, st memory.Stage) error {
		if st != memory.BeforeStore {
			return nil
		}
		switch n := calls.Add(1); {
		case n <= 3:
			return errTransient // the whole first window fails
		case n == 4:
			close(inRetry) // the first retry: hold it until more appends came in
			<-gate
		}
		return nil
	})
	w := e.open(t, "t/0000", 0)
	const total = 6
	errs := make([]error, total)
	var wg sync.WaitGroup
	wg.Add(total)
	appendAsync := func(i int) {
		w.AppendAsync(context.Background(), msg(strconv.Itoa(i)), func(_ *wal.AppendResult, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	for i := 0; i < 3; i++ {
		appendAsync(i)
	}
	select {
	case <-inRetry:
	case <-time.After(wait):
		t.Fatal("the failed window was not retried")
	}
	for i := 3; i < total; i++ {
		appendAsync(i)
	}
	close(gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if got := payloads(readAll(t, w)); !equal(got, []string{"0", "1", "2", "3", "4", "5"}) {
		t.Fatalf("log = %v, want call order", got)
	}
}

// TestSmallAsyncWindow: with a window of 2 the callers block for room and
// everything is stored in order.
func TestSmallAsyncWindow(t *testing.T) {
	for _, shuffled := range []bool{false, true} {
		t.Run(fmt.Sprintf("shuffled=%v", shuffled), func(t *testing.T) {
			e := newEnv(t, shuffled, wal.WithAsyncWindow(2))
			w := e.open(t, "t/0000", 0)
			const total = 200
			var wg sync.WaitGroup
			wg.Add(total)
			for i := 0; i < total; i++ {
				w.AppendAsync(context.Background(), msg(strconv.Itoa(i)), func(_ *wal.AppendResult, err error) {
					defer wg.Done()
					if err != nil {
						t.Errorf("append %d: %v", i, err)
					}
				})
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(wait):
				t.Fatal("appends did not complete")
			}
			got := payloads(readAll(t, w))
			if len(got) != total {
				t.Fatalf("read %d messages, want %d", len(got), total)
			}
			for i, p := range got {
				if p != strconv.Itoa(i) {
					t.Fatalf("position %d holds %q", i, p)
				}
			}
		})
	}
}

// TestScannerCloseWithUnreadMessages: a scanner whose reader stopped reading
// (messages pending for Chan) still closes promptly, and so does its WAL.
func TestScannerCloseWithUnreadMessages(t *testing.T) {
	e := newEnv(t, false)
	w := e.open(t, "t/0000", 0)
	ctx := context.Background()
	for i := 0; i < 300; i++ {
		if _, err := w.Append(ctx, msg(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	s1, err := w.Read(ctx, wal.ReadOption{DeliverPolicy: wal.DeliverAll()})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := w.Read(ctx, wal.ReadOption{DeliverPolicy: wal.DeliverAll()})
	if err != nil {
		t.Fatal(err)
	}
	readN(t, s1, 1)
	readN(t, s2, 1)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = s1.Close()
	}()
	select {
	case <-closed:
	case <-time.After(wait):
		t.Fatal("Close of a scanner with unread messages did not return")
	}
	if !errors.Is(s1.Error(), wal.ErrScannerClosed) {
		t.Fatalf("Error = %v, want ErrScannerClosed", s1.Error())
	}
	closed = make(chan struct{})
	go func() {
		defer close(closed)
		w.Close()
	}()
	select {
	case <-closed:
	case <-time.After(wait):
		t.Fatal("WAL Close with an unread scanner did not return")
	}
	if !errors.Is(s2.Error(), wal.ErrClosed) {
		t.Fatalf("scanner of the closed WAL: Error = %v, want ErrClosed", s2.Error())
	}
}

// TestBatchRetries: a transient failure before the batch was stored is
// retried; a lost acknowledgement is retried too, and the retry finds the
// chain moved (ErrStaleChain) — LastMarker then shows the batch is there.
func TestBatchRetries(t *testing.T) {
	e := newEnv(t, false)
	w := e.open(t, "out/0000", 0)
	var before, after atomic.Int64
	e.mem.SetAppendHook(func(_ string, m *message.MutableMessage, st memory.Stage) error {
		switch {
		case st == memory.BeforeStore && before.Add(1) <= 2:
			return errTransient
		case st == memory.AfterStore && m.Properties["marker"] != "" && after.Add(1) == 2:
			return errTransient // the second batch's acknowledgement is lost
		}
		return nil
	})
	ctx := context.Background()
	r1, err := w.AppendBatch(ctx, wal.Batch{Messages: []message.MutableMessage{msg("a"), msg("b")}, Chain: "s", Marker: []byte("1")})
	if err != nil {
		t.Fatalf("batch with transient failures before storing: %v", err)
	}
	_, err = w.AppendBatch(ctx, wal.Batch{Messages: []message.MutableMessage{msg("c")}, Chain: "s", Marker: []byte("2"), After: r1.MarkerID})
	if !errors.Is(err, wal.ErrStaleChain) {
		t.Fatalf("batch whose acknowledgement was lost: %v, want ErrStaleChain from the retry", err)
	}
	if m, err := w.LastMarker(ctx, "s"); err != nil || string(m.Payload) != "2" {
		t.Fatalf("LastMarker = %+v, %v; want the second batch's marker", m, err)
	}
	if got := payloads(readAll(t, w)); !equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("log = %v, want each batch once", got)
	}
	if n, atomic := w.BatchLimits(); n != memory.MaxBatch || !atomic {
		t.Fatalf("BatchLimits = %d, %v", n, atomic)
	}
}
