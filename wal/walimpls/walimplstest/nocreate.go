package walimplstest

import (
	"errors"
	"testing"

	"github.com/consumerd/consumerd/wal/walimpls"
)

// testNoCreate: OpenOption.NoCreate opens an existing channel and refuses
// a missing one (never made, or removed) with a permanent ErrNoChannel,
// without creating it.
func testNoCreate(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	const ch = "conf-nocreate/0000"
	noCreate := func() error {
		w, err := o.Open(ctx, &walimpls.OpenOption{Channel: ch, NoCreate: true})
		if err == nil {
			w.Close()
		}
		return err
	}
	if err := noCreate(); !errors.Is(err, walimpls.ErrNoChannel) || walimpls.IsRetryable(err) {
		t.Fatalf("NoCreate of a missing channel: %v; want a permanent ErrNoChannel", err)
	}
	if err := noCreate(); !errors.Is(err, walimpls.ErrNoChannel) {
		t.Fatalf("NoCreate again: %v; the first NoCreate created the channel", err)
	}
	w := open(t, ctx, o, ch, 0)
	appendN(t, ctx, w, 1, "n-")
	w.Close()
	if err := noCreate(); err != nil {
		t.Fatalf("NoCreate of an existing channel: %v", err)
	}
	r, ok := o.(walimpls.ChannelRemover)
	if !ok {
		return
	}
	if err := r.RemoveChannel(ctx, ch); err != nil {
		t.Fatalf("RemoveChannel: %v", err)
	}
	if err := noCreate(); !errors.Is(err, walimpls.ErrNoChannel) {
		t.Fatalf("NoCreate of a removed channel: %v; want ErrNoChannel", err)
	}
}
