package wal_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// A verifying Read (ReadOption.Verify) refuses a start position the channel
// no longer holds — past its end, before its first message, or in another
// incarnation of it — with a *LostError, and opens at every position it
// does hold.
func TestVerifyingReadChecksTheStart(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	const ch = "words/0000"
	w := e.open(t, ch, 0)
	for i := 0; i < 10; i++ {
		if _, err := w.Append(ctx, msg("m")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Truncate(ctx, 4); err != nil {
		t.Fatal(err)
	}
	b, err := w.Bounds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	read := func(w wal.WAL, dp wal.DeliverPolicy, inc string) error {
		s, err := w.Read(ctx, wal.ReadOption{Name: "verify", DeliverPolicy: dp, Verify: true, Incarnation: inc})
		if err == nil {
			_ = s.Close()
		}
		return err
	}
	for _, tc := range []struct {
		name   string
		dp     wal.DeliverPolicy
		inc    string
		reason string // "" when the read opens
	}{
		{"at the end", wal.DeliverStartAfter(10), b.Incarnation, ""},
		{"before the first held", wal.DeliverStartAfter(3), b.Incarnation, ""},
		{"from the first held", wal.DeliverStartFrom(4), "", ""},
		{"all", wal.DeliverAll(), b.Incarnation, ""},
		{"latest", wal.DeliverLatest(), "", ""},
		{"past the end", wal.DeliverStartAfter(11), b.Incarnation, "went backwards"},
		{"removed unread", wal.DeliverStartAfter(2), b.Incarnation, "removed before they were read"},
		{"another incarnation", wal.DeliverStartAfter(5), "other", "created again"},
		{"all of another incarnation", wal.DeliverAll(), "other", "created again"},
	} {
		err := read(w, tc.dp, tc.inc)
		var lost *wal.LostError
		switch {
		case tc.reason == "" && err != nil:
			t.Errorf("%s: %v, want the read to open", tc.name, err)
		case tc.reason != "" && (!errors.As(err, &lost) || !errors.Is(err, wal.ErrChannelLost)):
			t.Errorf("%s: %v, want a *LostError", tc.name, err)
		case tc.reason != "" && !strings.Contains(lost.Reason(), tc.reason):
			t.Errorf("%s: reason %q, want one saying %q", tc.name, lost.Reason(), tc.reason)
		}
	}

	// Removed and created again: the old position is in another life.
	w.Close()
	if err := e.opener.(wal.ChannelRemover).RemoveChannel(ctx, ch); err != nil {
		t.Fatal(err)
	}
	w2 := e.open(t, ch, 0)
	for i := 0; i < 12; i++ {
		if _, err := w2.Append(ctx, msg("again")); err != nil {
			t.Fatal(err)
		}
	}
	err = read(w2, wal.DeliverStartAfter(message.MessageID(10)), b.Incarnation)
	var lost *wal.LostError
	if !errors.As(err, &lost) || lost.After != 10 || lost.Incarnation != b.Incarnation || lost.Now.Last != 12 {
		t.Fatalf("read of the re-created channel after 10: %v, want a loss naming the old incarnation and the new last id 12", err)
	}
	if err := read(w2, wal.DeliverStartAfter(message.MessageID(10)), ""); err != nil {
		t.Fatalf("read without a recorded incarnation: %v", err)
	}
}
