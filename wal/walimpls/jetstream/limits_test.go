package jetstream_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// An operator lowers a stream's max_msg_size with the NATS API. A WAL
// opened afterwards refuses, locally and permanently, a message the stream
// can never take — CheckMessage (what a shard asks when an app stages an
// output) and AppendBatch alike — naming the limit; a message below it
// passes. A WAL opened before the change meets the server's refusal, which
// is permanent too: never retried forever.
func TestMessageLimitOfTheStream(t *testing.T) {
	url := natstest.Start(t)
	ctx := ctxFor(t)
	o := buildOpener(t, jetstream.Config{URL: url})
	before := openWAL(t, o, "lim/0000", 0)
	js := streamAdmin(t, url)
	st, err := js.Stream(ctx, streamOf(t, jetstream.DefaultNamespace, "lim/0000"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxMsgSize = 1000
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	w := openWAL(t, o, "lim/0000", 0)
	big := message.MutableMessage{Key: "k", Payload: make([]byte, 1000)}
	small := message.MutableMessage{Key: "k", Payload: make([]byte, 500)}
	limitErr := func(what string, err error) {
		t.Helper()
		if err == nil || walimpls.IsRetryable(err) || !errors.Is(err, walimpls.ErrMessageLimit) {
			t.Fatalf("%s: %v; want a permanent error wrapping ErrMessageLimit", what, err)
		}
		for _, want := range []string{"max_msg_size", "1000 bytes", "lim/0000"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%s: %q does not name %q", what, err, want)
			}
		}
	}
	mc := w.(walimpls.MessageChecker)
	limitErr("CheckMessage", mc.CheckMessage(&big))
	if err := mc.CheckMessage(&small); err != nil {
		t.Fatalf("CheckMessage of %d bytes under a limit of 1000: %v", len(small.Payload), err)
	}
	_, err = w.(walimpls.BatchAppender).AppendBatch(ctx, walimpls.Batch{Messages: []message.MutableMessage{small, big}, Chain: "c", Marker: []byte("1:0:1")})
	limitErr("AppendBatch", err)
	_, err = before.(walimpls.BatchAppender).AppendBatch(ctx, walimpls.Batch{Messages: []message.MutableMessage{{Payload: big.Payload}}, Chain: "c", Marker: []byte("1:0:1")})
	if err == nil || walimpls.IsRetryable(err) {
		t.Fatalf("AppendBatch through a WAL opened before the limit: %v; want the server's permanent refusal", err)
	}
	limitErr("AppendBatch through a WAL opened before the limit", err)
	if _, err := w.(walimpls.BatchAppender).AppendBatch(ctx, walimpls.Batch{Messages: []message.MutableMessage{small}, Chain: "c", Marker: []byte("1:0:1")}); err != nil {
		t.Fatalf("a batch under the limit: %v", err)
	}
}

// Open with NoCreate opens an existing channel and refuses a missing one —
// never made, or removed by an operator — without creating its stream.
func TestOpenNoCreate(t *testing.T) {
	url := natstest.Start(t)
	ctx := ctxFor(t)
	o := buildOpener(t, jetstream.Config{URL: url})
	js := streamAdmin(t, url)
	openNoCreate := func(ch string) error {
		w, err := o.Open(ctx, &walimpls.OpenOption{Channel: ch, NoCreate: true})
		if err == nil {
			w.Close()
		}
		return err
	}
	if err := openNoCreate("out/0000"); !errors.Is(err, walimpls.ErrNoChannel) || walimpls.IsRetryable(err) {
		t.Fatalf("NoCreate of a missing channel: %v; want a permanent ErrNoChannel", err)
	}
	if names := streamNames(t, ctx, js); len(names) != 0 {
		t.Fatalf("NoCreate created streams %v", names)
	}
	openWAL(t, o, "out/0000", 0).Close()
	if err := openNoCreate("out/0000"); err != nil {
		t.Fatalf("NoCreate of an existing channel: %v", err)
	}
	stream := streamOf(t, jetstream.DefaultNamespace, "out/0000")
	if err := js.DeleteStream(ctx, stream); err != nil {
		t.Fatal(err)
	}
	if err := openNoCreate("out/0000"); !errors.Is(err, walimpls.ErrNoChannel) {
		t.Fatalf("NoCreate of a removed channel: %v; want ErrNoChannel", err)
	}
	if names := streamNames(t, ctx, js); slices.Contains(names, stream) {
		t.Fatalf("NoCreate re-created stream %s", stream)
	}
}
