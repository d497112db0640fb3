package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/embednats"
	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// Restarting the embedded server on the same store keeps the channel and ids
// keep increasing; a fenced writer's term survives too.
func TestServerRestartKeepsIDsAndTerms(t *testing.T) {
	dir := t.TempDir()
	port := freeport.Port(t) // the server comes back on the same address
	srv := natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})
	ctx := ctxFor(t)
	o := buildOpener(t, jetstream.Config{URL: srv.URL()})
	w := openWAL(t, o, "recovery/restart", 3)
	var last message.MessageID
	for i := 0; i < 5; i++ {
		id, err := w.Append(ctx, message.MutableMessage{Payload: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		last = id
	}
	if err := w.Truncate(ctx, last); err != nil {
		t.Fatal(err)
	}
	w.Close()
	o.Close()
	srv.Shutdown()

	srv2 := natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})
	o2 := buildOpener(t, jetstream.Config{URL: srv2.URL()})
	stale := openWAL(t, o2, "recovery/restart", 2)
	if _, err := stale.Append(ctx, message.MutableMessage{Payload: []byte("stale")}); !errors.Is(err, walimpls.ErrFenced) {
		t.Fatalf("term 2 after restart: %v, want ErrFenced (term 3 was recorded)", err)
	}
	w2 := openWAL(t, o2, "recovery/restart", 4)
	id, err := w2.Append(ctx, message.MutableMessage{Payload: []byte("after")})
	if err != nil || id <= last {
		t.Fatalf("append after restart: id %d, %v; want above %d", id, err, last)
	}
	got := readAll(t, w2, 2)
	if got[0].ID != last || got[1].ID != id {
		t.Fatalf("after restart read ids %d,%d; want %d,%d (truncation kept)", got[0].ID, got[1].ID, last, id)
	}
	if _, err := w2.Read(ctx, walimpls.ReadOption{DeliverPolicy: walimpls.DeliverStartFrom(last - 1)}); !errors.Is(err, walimpls.ErrTruncated) {
		t.Fatalf("read below the truncation point after restart: %v, want ErrTruncated", err)
	}
}

// A scanner and a writer on one connection ride through a restart of the
// server on the same port and store: the client reconnects, the ordered
// consumer resumes after the last delivered id, and appends continue above
// the old ids.
func TestScannerAndWriterSurviveServerRestart(t *testing.T) {
	dir := t.TempDir()
	port := freeport.Port(t) // the server comes back on the same address
	srv := natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})
	ctx := ctxFor(t)
	o := buildOpener(t, jetstream.Config{URL: srv.URL()})
	w := openWAL(t, o, "words/0001", 0)
	first, err := w.Append(ctx, message.MutableMessage{Payload: []byte("before")})
	if err != nil {
		t.Fatal(err)
	}
	s, err := w.Read(ctx, walimpls.ReadOption{DeliverPolicy: walimpls.DeliverAll()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if m := <-s.Chan(); m.ID != first {
		t.Fatalf("first id %d, want %d", m.ID, first)
	}
	srv.Shutdown()
	natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})

	// Appends fail while the client reconnects; retry until one lands (the
	// adaptor does this for callers). A DedupeID makes the retries idempotent:
	// an attempt that timed out may still be stored once the client
	// reconnects.
	var next message.MessageID
	waitfor.Until(t, 15*time.Second, "an append to succeed after the restart", func() (bool, string) {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		id, err := w.Append(actx, message.MutableMessage{Payload: []byte("after"), DedupeID: "after-1"})
		if err != nil {
			return false, err.Error()
		}
		next = id
		return true, ""
	})
	if next <= first {
		t.Fatalf("id after restart %d not above %d", next, first)
	}
	select {
	case m, ok := <-s.Chan():
		if !ok {
			t.Fatalf("scanner stopped across the restart: %v", s.Error())
		}
		if m.ID != next || string(m.Payload) != "after" {
			t.Fatalf("after restart scanner got id %d %q, want id %d \"after\"", m.ID, m.Payload, next)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("scanner delivered nothing within 20s after the restart")
	}
}

// A channel whose messages were all truncated still never reuses ids after a
// server restart (the store keeps the last sequence), and reads below the
// truncation point still fail.
func TestFullyTruncatedChannelSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	srv := natstest.StartServer(t, embednats.Config{StoreDir: dir})
	ctx := ctxFor(t)
	o := buildOpener(t, jetstream.Config{URL: srv.URL()})
	w := openWAL(t, o, "words/0009", 0)
	var last message.MessageID
	for i := 0; i < 5; i++ {
		id, err := w.Append(ctx, message.MutableMessage{Payload: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		last = id
	}
	if err := w.Truncate(ctx, last+100); err != nil { // clamped to last+1: everything goes
		t.Fatal(err)
	}
	if got, err := w.LastID(ctx); err != nil || got != last {
		t.Fatalf("LastID after truncating everything: %d, %v; want %d (it never goes down)", got, err, last)
	}
	w.Close()
	o.Close()
	srv.Shutdown()

	srv2 := natstest.StartServer(t, embednats.Config{StoreDir: dir})
	w2 := openWAL(t, buildOpener(t, jetstream.Config{URL: srv2.URL()}), "words/0009", 0)
	id, err := w2.Append(ctx, message.MutableMessage{Payload: []byte("after")})
	if err != nil || id <= last {
		t.Fatalf("append after restart: id %d, %v; want above %d", id, err, last)
	}
	if _, err := w2.Read(ctx, walimpls.ReadOption{DeliverPolicy: walimpls.DeliverStartFrom(last)}); !errors.Is(err, walimpls.ErrTruncated) {
		t.Fatalf("read from truncated id %d: %v, want ErrTruncated", last, err)
	}
	if got := readAll(t, w2, 1); got[0].ID != id {
		t.Fatalf("DeliverAll after restart starts at %d, want %d", got[0].ID, id)
	}
}

// A fenced writer keeps its term across a server restart: once the client has
// reconnected its appends succeed again (its chain resynchronises), ids keep
// increasing, and a lower term is still fenced.
func TestFencedWriterRidesThroughServerRestart(t *testing.T) {
	dir := t.TempDir()
	port := freeport.Port(t) // the server comes back on the same address
	srv := natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})
	ctx := ctxFor(t)
	o := buildOpener(t, jetstream.Config{URL: srv.URL()})
	w := openWAL(t, o, "recovery/ride", 5)
	var last message.MessageID
	for i := 0; i < 3; i++ {
		id, err := w.Append(ctx, message.MutableMessage{Payload: []byte(fmt.Sprint("before-", i))})
		if err != nil {
			t.Fatal(err)
		}
		last = id
	}
	srv.Shutdown()
	natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})

	var next message.MessageID
	waitfor.Until(t, 15*time.Second, "an append to succeed after the restart", func() (bool, string) {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		id, err := w.Append(actx, message.MutableMessage{Payload: []byte("after"), DedupeID: "ride-after"})
		if errors.Is(err, walimpls.ErrFenced) {
			t.Fatalf("writer fenced by a restart: %v", err)
		}
		if err != nil {
			return false, err.Error()
		}
		next = id
		return true, ""
	})
	if next <= last {
		t.Fatalf("id after restart %d not above %d", next, last)
	}
	// The chain continues normally after the resync.
	more, err := w.Append(ctx, message.MutableMessage{Payload: []byte("more")})
	if err != nil || more <= next {
		t.Fatalf("append after resync: id %d, %v; want above %d", more, err, next)
	}
	stale := openWAL(t, o, "recovery/ride", 4)
	if _, err := stale.Append(ctx, message.MutableMessage{Payload: []byte("stale")}); !errors.Is(err, walimpls.ErrFenced) {
		t.Fatalf("term 4 after restart: %v, want ErrFenced", err)
	}
	got := readAll(t, w, 5)
	var payloads []string
	for _, m := range got {
		payloads = append(payloads, string(m.Payload))
	}
	if strings.Join(payloads, ",") != "before-0,before-1,before-2,after,more" {
		t.Fatalf("channel holds %v", payloads)
	}
}
