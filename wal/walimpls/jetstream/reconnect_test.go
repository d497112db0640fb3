package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/consumerd/consumerd/internal/embednats"
	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// TestIdempotentAppendNotBufferedWhileReconnecting: while the client
// reconnects, an unfenced append with a DedupeID fails at once, retryably
// (nats.ErrDisconnected), instead of waiting in nats.go's reconnect buffer
// — flushed at the reconnect, it would be stored ahead of the appends the
// disconnect failed, which the adaptor resends in call order. After the
// restart the refused message is not in the stream.
func TestIdempotentAppendNotBufferedWhileReconnecting(t *testing.T) {
	dir := t.TempDir()
	port := freeport.Port(t)
	srv := natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})
	ctx := ctxFor(t)
	o := buildOpener(t, jetstream.Config{URL: srv.URL()})
	w := openWAL(t, o, "words/0002", 0)
	if _, err := w.Append(ctx, message.MutableMessage{Payload: []byte("before"), DedupeID: "r/1"}); err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	ci := o.(walimpls.ConnectionInfo)
	waitfor.Until(t, 10*time.Second, "the client to see the disconnect", func() (bool, string) {
		return !ci.Connected(), "still connected"
	})
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := w.Append(actx, message.MutableMessage{Payload: []byte("refused"), DedupeID: "r/2"})
	if !errors.Is(err, nats.ErrDisconnected) || !walimpls.IsRetryable(err) || time.Since(start) > time.Second {
		t.Fatalf("idempotent append while reconnecting: %v after %v; want a retryable nats.ErrDisconnected at once", err, time.Since(start))
	}

	natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})
	waitfor.Until(t, 15*time.Second, "an append to succeed after the restart", func() (bool, string) {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := w.Append(actx, message.MutableMessage{Payload: []byte("after"), DedupeID: "r/3"}); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	got := readAll(t, w, 2)
	if string(got[0].Payload) != "before" || string(got[1].Payload) != "after" {
		t.Fatalf("stream holds %q, %q; want before, after (the refused append never sent)", got[0].Payload, got[1].Payload)
	}
	if cnt, err := w.(walimpls.Counter).Count(ctx); err != nil || cnt != 2 {
		t.Fatalf("stream count %d, %v; want 2", cnt, err)
	}
}
