package memory_test

import (
	"context"
	"errors"
	"testing"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// SetMaxMessageBytes bounds messages as a server's limit does: CheckMessage,
// Append and AppendBatch refuse a larger one permanently; NoCreate opens
// existing channels only.
func TestMessageLimitAndNoCreate(t *testing.T) {
	ctx := context.Background()
	b := memory.NewBuilder()
	b.SetMaxMessageBytes(100)
	o, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, err := o.Open(ctx, &walimpls.OpenOption{Channel: "out/0000", NoCreate: true}); !errors.Is(err, walimpls.ErrNoChannel) {
		t.Fatalf("NoCreate of a missing channel: %v", err)
	}
	w, err := o.Open(ctx, &walimpls.OpenOption{Channel: "out/0000"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	big := message.MutableMessage{Key: "k", Payload: make([]byte, 100)}
	permanent := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, walimpls.ErrMessageLimit) || walimpls.IsRetryable(err) {
			t.Fatalf("%s: %v; want a permanent ErrMessageLimit", what, err)
		}
	}
	permanent("CheckMessage", w.(walimpls.MessageChecker).CheckMessage(&big))
	_, err = w.Append(ctx, big)
	permanent("Append", err)
	_, err = w.(walimpls.BatchAppender).AppendBatch(ctx, walimpls.Batch{Messages: []message.MutableMessage{big}, Chain: "c", Marker: []byte("m")})
	permanent("AppendBatch", err)
	if _, err := w.Append(ctx, message.MutableMessage{Key: "k", Payload: make([]byte, 99)}); err != nil {
		t.Fatalf("a message of 100 bytes: %v", err)
	}
	w2, err := o.Open(ctx, &walimpls.OpenOption{Channel: "out/0000", NoCreate: true})
	if err != nil {
		t.Fatalf("NoCreate of an existing channel: %v", err)
	}
	w2.Close()
}
