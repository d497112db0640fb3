package wal_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
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
