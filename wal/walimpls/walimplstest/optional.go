package walimplstest

import (
	"errors"
	"testing"

	"github.com/consumerd/consumerd/wal/walimpls"
)

// testCount: walimpls.Counter counts what is stored, truncation included.
func testCount(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-count/0000", 0)
	defer w.Close()
	c, ok := w.(walimpls.Counter)
	if !ok {
		t.Skipf("%s WALs do not implement walimpls.Counter", w.WALName())
	}
	if n, err := c.Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count of an empty channel = %d, %v; want 0", n, err)
	}
	ids := appendN(t, ctx, w, 5, "c-")
	if n, err := c.Count(ctx); err != nil || n != 5 {
		t.Fatalf("Count after 5 appends = %d, %v; want 5", n, err)
	}
	if err := w.Truncate(ctx, ids[2]); errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("%s cannot truncate: %v", w.WALName(), err)
	} else if err != nil {
		t.Fatalf("Truncate: %v", err)
	}
	if n, err := c.Count(ctx); err != nil || n != 3 {
		t.Fatalf("Count after truncating 2 of 5 = %d, %v; want 3", n, err)
	}
}

// testRemoveChannel: walimpls.ChannelRemover deletes a channel and its
// messages; removing a missing channel is fine; reopening starts empty.
func testRemoveChannel(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	r, ok := o.(walimpls.ChannelRemover)
	if !ok {
		t.Skipf("%s openers do not implement walimpls.ChannelRemover", b.Name())
	}
	const ch = "conf-remove/0000"
	w := open(t, ctx, o, ch, 0)
	appendN(t, ctx, w, 3, "r-")
	w.Close()
	other := open(t, ctx, o, "conf-remove/0001", 0)
	defer other.Close()
	kept := appendOne(t, ctx, other, "kept")
	if err := r.RemoveChannel(ctx, ch); err != nil {
		t.Fatalf("RemoveChannel %q: %v", ch, err)
	}
	if err := r.RemoveChannel(ctx, ch); err != nil {
		t.Fatalf("RemoveChannel of a removed channel: %v", err)
	}
	if err := r.RemoveChannel(ctx, "conf-remove/never"); err != nil {
		t.Fatalf("RemoveChannel of a channel never opened: %v", err)
	}
	w = open(t, ctx, o, ch, 0)
	defer w.Close()
	if last, err := w.LastID(ctx); err != nil || last != 0 {
		t.Fatalf("LastID of the removed channel reopened = %d, %v; want 0", last, err)
	}
	expectQuiet(t, read(t, ctx, w, walimpls.DeliverAll()))
	if got := receive(t, read(t, ctx, other, walimpls.DeliverAll()), 1); got[0].ID != kept {
		t.Fatalf("the other channel lost its message: %v", ids(got))
	}
}

// testLastIDAfterTruncate: LastID never goes down while the channel exists,
// not even when Truncate removed every message: a reader whose position is
// above LastID can then only mean the channel lost messages.
func testLastIDAfterTruncate(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-lastid-trunc/0000", 0)
	defer w.Close()
	ids := appendN(t, ctx, w, 3, "t-")
	last := ids[len(ids)-1]
	if err := w.Truncate(ctx, last+1); errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("%s cannot truncate: %v", w.WALName(), err)
	} else if err != nil {
		t.Fatalf("Truncate past the end: %v", err)
	}
	if got, err := w.LastID(ctx); err != nil || got != last {
		t.Fatalf("LastID after truncating every message = %d, %v; want %d (the last id removed)", got, err, last)
	}
	next := appendOne(t, ctx, w, "after")
	if got, err := w.LastID(ctx); err != nil || got != next || next <= last {
		t.Fatalf("LastID after an append past the truncation = %d, %v; want %d > %d", got, err, next, last)
	}
}
