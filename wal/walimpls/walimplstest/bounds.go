package walimplstest

import (
	"errors"
	"testing"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// bounds reads w's Bounds, failing t on an error.
func bounds(t testing.TB, w walimpls.WALImpls) walimpls.Bounds {
	t.Helper()
	b, err := w.Bounds(testCtx(t))
	if err != nil {
		t.Fatalf("Bounds of %q: %v", w.Channel(), err)
	}
	return b
}

// testBounds: a channel's Bounds follow its appends and truncation, its
// incarnation survives a reopen, and a removed channel created again is
// another incarnation whose ids start over; Holds tells a reader's recorded
// position apart from a lost one.
func testBounds(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	const ch = "conf-bounds/0000"
	w := open(t, ctx, o, ch, 0)
	empty := bounds(t, w)
	if empty.First != 1 || empty.Last != 0 {
		t.Fatalf("Bounds of a new channel = %+v, want First 1, Last 0", empty)
	}
	all := appendN(t, ctx, w, 10, "b-")
	got := bounds(t, w)
	if got.First != all[0] || got.Last != all[9] || got.Incarnation != empty.Incarnation {
		t.Fatalf("Bounds after 10 appends = %+v, want First %d, Last %d, incarnation %q", got, all[0], all[9], empty.Incarnation)
	}
	for _, tc := range []struct {
		id   message.MessageID
		inc  string
		want bool
	}{
		{0, "", true}, {all[4], got.Incarnation, true}, {all[9], got.Incarnation, true},
		{all[9] + 1, got.Incarnation, false}, // the channel lost what the reader read
	} {
		if h := got.Holds(tc.id, tc.inc); h != tc.want {
			t.Errorf("Bounds %+v Holds(%d, %q) = %v, want %v", got, tc.id, tc.inc, h, tc.want)
		}
	}
	w.Close()
	w = open(t, ctx, o, ch, 0)
	if again := bounds(t, w); again != got {
		t.Fatalf("Bounds after a reopen = %+v, want %+v", again, got)
	}
	if err := w.Truncate(ctx, all[5]); err == nil {
		tr := bounds(t, w)
		if tr.First != all[5] || tr.Last != all[9] {
			t.Fatalf("Bounds after Truncate(%d) = %+v, want First %d, Last %d", all[5], tr, all[5], all[9])
		}
		if tr.Holds(all[2], tr.Incarnation) {
			t.Errorf("Bounds %+v hold position %d: messages after it were removed", tr, all[2])
		}
	} else if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Truncate(%d): %v", all[5], err)
	}
	w.Close()
	r, ok := o.(walimpls.ChannelRemover)
	if !ok {
		return
	}
	if err := r.RemoveChannel(ctx, ch); err != nil {
		t.Fatalf("RemoveChannel %q: %v", ch, err)
	}
	w = open(t, ctx, o, ch, 0)
	defer w.Close()
	appendN(t, ctx, w, 2, "again-")
	re := bounds(t, w)
	if got.Incarnation != "" && re.Incarnation == got.Incarnation {
		t.Fatalf("the channel removed and created again kept incarnation %q", re.Incarnation)
	}
	if re.Holds(all[1], got.Incarnation) {
		t.Fatalf("Bounds %+v of the new channel hold position %d of the old one", re, all[1])
	}
}
