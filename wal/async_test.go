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

	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

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
