package walimplstest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/consumerd/consumerd/wal/walimpls"
)

// Reads: deliver policies and truncation.

func testDeliverAll(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-all/0000", 0)
	defer w.Close()
	// A scanner opened on an empty channel waits, then sees later appends.
	early := read(t, ctx, w, walimpls.DeliverAll())
	expectQuiet(t, early)
	want := appendN(t, ctx, w, 10, "m")
	if got := ids(receive(t, early, 10)); !equalIDs(got, want) {
		t.Fatalf("DeliverAll on empty channel then appends: ids %v, want %v", got, want)
	}
	if got := ids(receive(t, read(t, ctx, w, walimpls.DeliverAll()), 10)); !equalIDs(got, want) {
		t.Fatalf("DeliverAll: ids %v, want %v", got, want)
	}
	s := read(t, ctx, w, walimpls.DeliverStartAfter(0))
	if got := ids(receive(t, s, 10)); !equalIDs(got, want) {
		t.Fatalf("DeliverStartAfter(0): ids %v, want %v", got, want)
	}
	expectQuiet(t, s)
}

func testDeliverLatest(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-latest/0000", 0)
	defer w.Close()
	// Idle, empty channel: nothing arrives until an append.
	s := read(t, ctx, w, walimpls.DeliverLatest())
	expectQuiet(t, s)
	id := appendOne(t, ctx, w, "new-1")
	if m := receive(t, s, 1)[0]; m.ID != id || string(m.Payload) != "new-1" {
		t.Fatalf("DeliverLatest: got id %d %q, want id %d new-1", m.ID, m.Payload, id)
	}
	expectQuiet(t, s)
	// Channel with history: the history is not delivered.
	appendN(t, ctx, w, 5, "old-")
	s2 := read(t, ctx, w, walimpls.DeliverLatest())
	expectQuiet(t, s2)
	id2 := appendOne(t, ctx, w, "new-2")
	if m := receive(t, s2, 1)[0]; m.ID != id2 || string(m.Payload) != "new-2" {
		t.Fatalf("DeliverLatest after history: got id %d %q, want id %d new-2", m.ID, m.Payload, id2)
	}
	expectQuiet(t, s2)
}

func testDeliverStartFromAfter(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-start/0000", 0)
	defer w.Close()
	all := appendN(t, ctx, w, 10, "m")
	for _, k := range []int{0, 4, 9} {
		s := read(t, ctx, w, walimpls.DeliverStartFrom(all[k]))
		if got := ids(receive(t, s, 10-k)); !equalIDs(got, all[k:]) {
			t.Fatalf("StartFrom(%d): ids %v, want %v", all[k], got, all[k:])
		}
		expectQuiet(t, s)
		s = read(t, ctx, w, walimpls.DeliverStartAfter(all[k]))
		if got := ids(receive(t, s, 9-k)); !equalIDs(got, all[k+1:]) {
			t.Fatalf("StartAfter(%d): ids %v, want %v", all[k], got, all[k+1:])
		}
		expectQuiet(t, s)
	}
	// Starting after the last message waits for the next one.
	s := read(t, ctx, w, walimpls.DeliverStartAfter(all[9]))
	expectQuiet(t, s)
	next := appendOne(t, ctx, w, "next")
	if m := receive(t, s, 1)[0]; m.ID != next {
		t.Fatalf("StartAfter(last) then append: got id %d, want %d", m.ID, next)
	}
}

// expectTruncated opens a scanner at p and requires ErrTruncated from Read or
// from the scanner's Error, with no message delivered and within a bound.
func expectTruncated(t testing.TB, ctx context.Context, w walimpls.WALImpls, p walimpls.DeliverPolicy) {
	t.Helper()
	s, err := w.Read(ctx, walimpls.ReadOption{Name: "conformance", DeliverPolicy: p})
	if err != nil {
		if !errors.Is(err, walimpls.ErrTruncated) {
			t.Fatalf("Read at %+v: error %v does not wrap ErrTruncated", p, err)
		}
		return
	}
	defer s.Close()
	timer := time.NewTimer(receiveTimeout)
	defer timer.Stop()
	select {
	case m, ok := <-s.Chan():
		if ok {
			t.Fatalf("Read at truncated %+v delivered id %d (%q): a silent skip", p, m.ID, m.Payload)
		}
	case <-timer.C:
		t.Fatalf("Read at truncated %+v: scanner neither failed nor delivered within %v (a stall)", p, receiveTimeout)
	}
	if err := waitStopped(t, s, closeTimeout); !errors.Is(err, walimpls.ErrTruncated) {
		t.Fatalf("scanner at truncated %+v stopped with %v, want an error wrapping ErrTruncated", p, err)
	}
}

func testTruncate(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "recovery/conf-truncate", 0)
	defer w.Close()
	all := appendN(t, ctx, w, 10, "m")
	if err := w.Truncate(ctx, all[5]); errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("%s cannot truncate: %v", w.WALName(), err)
	} else if err != nil {
		t.Fatalf("Truncate(%d): %v", all[5], err)
	}
	expectTruncated(t, ctx, w, walimpls.DeliverStartFrom(all[0]))
	expectTruncated(t, ctx, w, walimpls.DeliverStartFrom(all[4]))
	expectTruncated(t, ctx, w, walimpls.DeliverStartAfter(all[3]))
	// Positions 0 ask for everything from the start, which is gone.
	expectTruncated(t, ctx, w, walimpls.DeliverStartAfter(0))
	expectTruncated(t, ctx, w, walimpls.DeliverStartFrom(0))
	// DeliverAll starts at the truncation point.
	if got := ids(receive(t, read(t, ctx, w, walimpls.DeliverAll()), 5)); !equalIDs(got, all[5:]) {
		t.Fatalf("DeliverAll after Truncate(%d): ids %v, want %v", all[5], got, all[5:])
	}
	if got := ids(receive(t, read(t, ctx, w, walimpls.DeliverStartFrom(all[5])), 5)); !equalIDs(got, all[5:]) {
		t.Fatalf("StartFrom(%d) after Truncate: ids %v, want %v", all[5], got, all[5:])
	}
	if got := ids(receive(t, read(t, ctx, w, walimpls.DeliverStartAfter(all[4])), 5)); !equalIDs(got, all[5:]) {
		t.Fatalf("StartAfter(%d) after Truncate(%d): ids %v, want %v", all[4], all[5], got, all[5:])
	}
	last, err := w.LastID(ctx)
	if err != nil || last != all[9] {
		t.Fatalf("LastID after Truncate = %d, %v; want %d", last, err, all[9])
	}
	// Appends continue above the old ids.
	if id := appendOne(t, ctx, w, "after"); id <= all[9] {
		t.Fatalf("append after Truncate got id %d, not above %d", id, all[9])
	}
}

func testTruncateBehindScanner(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "recovery/conf-truncate-tail", 0)
	defer w.Close()
	all := appendN(t, ctx, w, 4, "m")
	s := read(t, ctx, w, walimpls.DeliverAll())
	receive(t, s, 4)
	// The scanner is caught up; truncating below its position changes nothing for it.
	if err := w.Truncate(ctx, all[3]); errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("%s cannot truncate: %v", w.WALName(), err)
	} else if err != nil {
		t.Fatalf("Truncate(%d): %v", all[3], err)
	}
	next := appendOne(t, ctx, w, "next")
	if m := receive(t, s, 1)[0]; m.ID != next {
		t.Fatalf("caught-up scanner after Truncate: got id %d, want %d", m.ID, next)
	}
}
