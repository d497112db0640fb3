package walimplstest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// Lifecycle: fencing, closing scanners and WALs, LastID.

func testFencing(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	const ch = "recovery/conf-fence"
	o := build(t, b)
	defer o.Close()
	w1 := open(t, ctx, o, ch, 1)
	defer w1.Close()
	ok1 := appendOne(t, ctx, w1, "w1-a")

	// A second opener, as another process would.
	o2 := build(t, b)
	defer o2.Close()
	w2 := open(t, ctx, o2, ch, 2)
	defer w2.Close()
	for i := 0; i < 3; i++ {
		expectFenced(t, ctx, w1, fmt.Sprintf("w1-fenced-%d", i))
	}
	ok2 := appendOne(t, ctx, w2, "w2-a")
	// A writer opening with a lower term is fenced from the start.
	w0 := open(t, ctx, o, ch, 1)
	defer w0.Close()
	expectFenced(t, ctx, w0, "stale")
	ok3 := appendOne(t, ctx, w2, "w2-b")
	got := receive(t, read(t, ctx, w2, walimpls.DeliverAll()), 3)
	if want := []message.MessageID{ok1, ok2, ok3}; !equalIDs(ids(got), want) {
		t.Fatalf("read back ids %v, want only the acknowledged %v", ids(got), want)
	}
	for i, want := range []string{"w1-a", "w2-a", "w2-b"} {
		if string(got[i].Payload) != want {
			t.Fatalf("message %d: payload %q, want %q", got[i].ID, got[i].Payload, want)
		}
	}
	// Fencing holds across openers built later too.
	o3 := build(t, b)
	defer o3.Close()
	w3 := open(t, ctx, o3, ch, 3)
	defer w3.Close()
	expectFenced(t, ctx, w2, "w2-fenced")
	appendOne(t, ctx, w3, "w3-a")
}

// expectFenced appends to a superseded writer: the append must fail with
// ErrFenced, or first retryably (a backend may learn of the fence only when
// it re-sends) and then, within a few re-sends, with ErrFenced. Callers
// check that nothing was stored.
func expectFenced(t testing.TB, ctx context.Context, w walimpls.WALImpls, payload string) {
	t.Helper()
	msg := message.MutableMessage{Payload: []byte(payload), DedupeID: "fenced-" + payload}
	for try := 1; try <= 3; try++ {
		_, err := w.Append(ctx, msg)
		switch {
		case errors.Is(err, walimpls.ErrFenced):
			return
		case err == nil:
			t.Fatalf("append %q of a superseded term: stored, want ErrFenced", payload)
		case !walimpls.IsRetryable(err):
			t.Fatalf("append %q of a superseded term, try %d: %v, want ErrFenced or a retryable error", payload, try, err)
		}
	}
	t.Fatalf("append %q of a superseded term: not ErrFenced after 3 tries", payload)
}

func testScannerCloseEarly(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-close/0000", 0)
	defer w.Close()
	appendN(t, ctx, w, 200, "m")
	cases := []struct {
		name string
		p    walimpls.DeliverPolicy
		take int
	}{
		{"busy", walimpls.DeliverAll(), 1},
		{"untouched", walimpls.DeliverAll(), 0},
		{"idle", walimpls.DeliverLatest(), 0},
	}
	for _, c := range cases {
		s, err := w.Read(ctx, walimpls.ReadOption{Name: "conformance-" + c.name, DeliverPolicy: c.p})
		if err != nil {
			t.Fatalf("%s: Read: %v", c.name, err)
		}
		if c.take > 0 {
			receive(t, s, c.take)
		}
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			_ = s.Close()
		}()
		select {
		case <-closed:
		case <-time.After(closeTimeout):
			t.Fatalf("%s: scanner Close did not return within %v", c.name, closeTimeout)
		}
		if err := waitStopped(t, s, closeTimeout); !errors.Is(err, walimpls.ErrScannerClosed) {
			t.Fatalf("%s: Error after Close = %v, want ErrScannerClosed", c.name, err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("%s: second Close: %v", c.name, err)
		}
	}
}

func testWALCloseStopsScanners(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-walclose/0000", 0)
	appendOne(t, ctx, w, "m")
	s := read(t, ctx, w, walimpls.DeliverLatest())
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		w.Close()
	}()
	select {
	case <-closed:
	case <-time.After(closeTimeout):
		t.Fatalf("WAL Close with an open scanner did not return within %v", closeTimeout)
	}
	if err := waitStopped(t, s, closeTimeout); err == nil {
		t.Fatalf("scanner of a closed WAL stopped with a nil Error")
	}
}

func testAppendAfterClose(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-closed/0000", 0)
	id := appendOne(t, ctx, w, "m")
	w.Close()
	if _, err := w.Append(ctx, message.MutableMessage{Payload: []byte("late")}); !errors.Is(err, walimpls.ErrClosed) {
		t.Fatalf("Append after Close: error %v, want ErrClosed", err)
	}
	// The message appended before Close is still there for a new WAL.
	w2 := open(t, ctx, o, "conf-closed/0000", 0)
	defer w2.Close()
	got := receive(t, read(t, ctx, w2, walimpls.DeliverAll()), 1)
	if got[0].ID != id {
		t.Fatalf("after reopen: id %d, want %d", got[0].ID, id)
	}
	expectQuiet(t, read(t, ctx, w2, walimpls.DeliverStartAfter(id)))
}

func testLastID(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-lastid/0000", 0)
	defer w.Close()
	if last, err := w.LastID(ctx); err != nil || last != 0 {
		t.Fatalf("LastID of an empty channel = %d, %v; want 0", last, err)
	}
	for i := 0; i < 3; i++ {
		id := appendOne(t, ctx, w, fmt.Sprintf("m%d", i))
		if last, err := w.LastID(ctx); err != nil || last != id {
			t.Fatalf("LastID after append %d = %d, %v; want %d", i, last, err, id)
		}
	}
	// Another WAL on the same channel sees the same LastID.
	w2 := open(t, ctx, o, "conf-lastid/0000", 0)
	defer w2.Close()
	want, _ := w.LastID(ctx)
	if last, err := w2.LastID(ctx); err != nil || last != want {
		t.Fatalf("LastID from a second WAL = %d, %v; want %d", last, err, want)
	}
}
