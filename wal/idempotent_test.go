package wal_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

func idemMsg(s string) message.MutableMessage {
	m := msg(s)
	m.DedupeID = "run/" + s
	return m
}

// TestPipelinedIdempotentFailureBeforeStoredRetried: on a term-0 WAL, an
// append with a DedupeID that failed while a later one was already stored
// (as the first appends after a broker restart, refused while JetStream
// recovers) is retried, not dropped: every append succeeds and each
// message is stored exactly once. The same window without DedupeIDs drops
// it (TestPipelinedFailureBeforeStoredNotRetried).
func TestPipelinedIdempotentFailureBeforeStoredRetried(t *testing.T) {
	e := newEnv(t, false)
	gate := make(chan struct{})
	var failed atomic.Bool
	e.mem.SetAppendHook(func(_ string, m *message.MutableMessage, st memory.Stage) error {
		switch {
		case st == memory.AfterStore && string(m.Payload) == "gate":
			<-gate
		case st == memory.BeforeStore && string(m.Payload) == "0" && failed.CompareAndSwap(false, true):
			return errTransient
		}
		return nil
	})
	w := e.open(t, "t/0000", 0)
	in := []string{"gate", "0", "1", "2", "3"}
	errs := make([]error, len(in))
	var wg sync.WaitGroup
	wg.Add(len(in))
	for i, p := range in {
		w.AppendAsync(context.Background(), idemMsg(p), func(_ *wal.AppendResult, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	close(gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("append %q: %v", in[i], err)
		}
	}
	if got := payloads(readAll(t, w)); !equal(got, []string{"gate", "1", "2", "3", "0"}) {
		t.Fatalf("log = %v, want [gate 1 2 3 0]: every message once, 0 retried after the stored ones", got)
	}
}

// TestIdempotentRetriedUntilContext: an idempotent append outlives the
// policy's attempts (10 here) while the backend keeps failing — as through a
// broker restart — and is stored once it recovers; it ends only with its
// context, naming the last error.
func TestIdempotentRetriedUntilContext(t *testing.T) {
	e := newEnv(t, false)
	h := &hookCounter{fail: 30, err: errTransient}
	e.mem.SetAppendHook(h.hook)
	w := e.open(t, "t/0000", 0)
	if _, err := w.Append(context.Background(), idemMsg("a")); err != nil {
		t.Fatalf("idempotent append through 30 transient failures: %v", err)
	}
	if got := payloads(readAll(t, w)); !equal(got, []string{"a"}) {
		t.Fatalf("log = %v, want [a]", got)
	}

	h.calls.Store(0)
	h.fail = 1 << 40
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	w.AppendAsync(ctx, idemMsg("b"), func(_ *wal.AppendResult, err error) { done <- err })
	if err := <-done; !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errTransient) {
		t.Fatalf("error %v, want the context's deadline and the last error", err)
	}
	if h.calls.Load() <= 10 {
		t.Fatalf("attempts = %d, want more than the policy's 10", h.calls.Load())
	}
}

// TestIdempotentWindowResentInRounds: a window of idempotent appends whose
// tries keep failing (30 failures over 20 appends, acknowledgements out of
// order) is resent round after round until each is stored: every append
// succeeds and each message is stored once, in call order.
func TestIdempotentWindowResentInRounds(t *testing.T) {
	e := newEnv(t, true)
	h := &hookCounter{fail: 30, err: errTransient}
	e.mem.SetAppendHook(h.hook)
	w := e.open(t, "t/0000", 0)
	const total = 20
	errs := make([]error, total)
	var want []string
	var wg sync.WaitGroup
	wg.Add(total)
	for i := 0; i < total; i++ {
		want = append(want, strconv.Itoa(i))
		w.AppendAsync(context.Background(), idemMsg(want[i]), func(_ *wal.AppendResult, err error) {
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
	if got := payloads(readAll(t, w)); !equal(got, want) {
		t.Fatalf("log = %v, want %v", got, want)
	}
}
