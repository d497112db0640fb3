package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

func openWAL(t *testing.T, b *memory.Builder, ch string, term uint64) walimpls.WALImpls {
	t.Helper()
	o, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	w, err := o.Open(context.Background(), &walimpls.OpenOption{Channel: ch, Term: term})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

func readPayloads(t *testing.T, w walimpls.WALImpls, n int) []string {
	t.Helper()
	s, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: walimpls.DeliverAll()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []string
	for len(out) < n {
		select {
		case m := <-s.Chan():
			out = append(out, string(m.Payload))
		case <-time.After(5 * time.Second):
			t.Fatalf("stalled after %v", out)
		}
	}
	return out
}

func TestHookStages(t *testing.T) {
	b := memory.NewBuilder()
	w := openWAL(t, b, "h/0000", 0)
	errBefore, errAfter := errors.New("before"), errors.New("after")
	b.SetAppendHook(func(ch string, m *message.MutableMessage, st memory.Stage) error {
		if ch != "h/0000" {
			t.Errorf("hook saw channel %q", ch)
		}
		switch {
		case string(m.Payload) == "drop" && st == memory.BeforeStore:
			return errBefore
		case string(m.Payload) == "lost-ack" && st == memory.AfterStore:
			return errAfter
		}
		return nil
	})
	ctx := context.Background()
	if _, err := w.Append(ctx, message.MutableMessage{Payload: []byte("drop")}); !errors.Is(err, errBefore) {
		t.Fatalf("BeforeStore error: %v", err)
	}
	if _, err := w.Append(ctx, message.MutableMessage{Payload: []byte("lost-ack")}); !errors.Is(err, errAfter) {
		t.Fatalf("AfterStore error: %v", err)
	}
	if _, err := w.Append(ctx, message.MutableMessage{Payload: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	b.SetAppendHook(nil)
	// "drop" was never stored; "lost-ack" was stored although its ack failed.
	got := readPayloads(t, w, 2)
	if got[0] != "lost-ack" || got[1] != "ok" {
		t.Fatalf("log = %v, want [lost-ack ok]", got)
	}
	if last, _ := w.LastID(ctx); last != 2 {
		t.Fatalf("LastID = %d, want 2", last)
	}
}

func TestHookDelay(t *testing.T) {
	b := memory.NewBuilder()
	w := openWAL(t, b, "h/0000", 0)
	release := make(chan struct{})
	b.SetAppendHook(func(_ string, _ *message.MutableMessage, st memory.Stage) error {
		if st == memory.BeforeStore {
			<-release
		}
		return nil
	})
	res := make(chan error, 1)
	go func() {
		_, err := w.Append(context.Background(), message.MutableMessage{Payload: []byte("x")})
		res <- err
	}()
	select {
	case err := <-res:
		t.Fatalf("append returned while the hook held it: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	if last, _ := w.LastID(context.Background()); last != 0 {
		t.Fatalf("message stored while the hook held it (LastID %d)", last)
	}
	close(release)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
}

func TestDedupe(t *testing.T) {
	b := memory.NewBuilder()
	w := openWAL(t, b, "d/0000", 0)
	ctx := context.Background()
	id1, err := w.Append(ctx, message.MutableMessage{Payload: []byte("a"), DedupeID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	id2, err := w.Append(ctx, message.MutableMessage{Payload: []byte("a-again"), DedupeID: "x"})
	if err != nil || id2 != id1 {
		t.Fatalf("duplicate append: id %d, %v; want the first id %d", id2, err, id1)
	}
	id3, err := w.Append(ctx, message.MutableMessage{Payload: []byte("b"), DedupeID: "y"})
	if err != nil || id3 <= id1 {
		t.Fatalf("distinct dedupe id: %d, %v", id3, err)
	}
	if got := readPayloads(t, w, 2); got[0] != "a" || got[1] != "b" {
		t.Fatalf("log = %v, want [a b]", got)
	}
	if last, _ := w.LastID(ctx); last != id3 {
		t.Fatalf("LastID = %d, want %d", last, id3)
	}
}

func TestTruncatePastEnd(t *testing.T) {
	b := memory.NewBuilder()
	w := openWAL(t, b, "tr/0000", 0)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := w.Append(ctx, message.MutableMessage{Payload: []byte{byte('a' + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Truncate(ctx, 100); err != nil {
		t.Fatal(err)
	}
	// Everything is gone; new ids continue above the old ones.
	id, err := w.Append(ctx, message.MutableMessage{Payload: []byte("d")})
	if err != nil || id != 4 {
		t.Fatalf("append after truncating past the end: %d, %v; want id 4", id, err)
	}
	if got := readPayloads(t, w, 1); got[0] != "d" {
		t.Fatalf("log = %v, want [d]", got)
	}
	if _, err := w.Read(ctx, walimpls.ReadOption{DeliverPolicy: walimpls.DeliverStartFrom(3)}); !errors.Is(err, walimpls.ErrTruncated) {
		t.Fatalf("read from a removed id: %v, want ErrTruncated", err)
	}
}

func TestBadInput(t *testing.T) {
	b := memory.NewBuilder()
	o, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, err := o.Open(context.Background(), &walimpls.OpenOption{}); err == nil {
		t.Fatal("Open with an empty channel name succeeded")
	}
	w := openWAL(t, b, "bad/0000", 0)
	if _, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: walimpls.DeliverPolicy{Kind: 42}}); err == nil {
		t.Fatal("Read with an unknown deliver policy succeeded")
	}
	if b.Name() != "memory" || w.WALName() != "memory" {
		t.Fatalf("names %q %q", b.Name(), w.WALName())
	}
}
