package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/internal/embednats"
	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// The tests of a verifying scanner (ReadOption.Verify) change a stream the
// way an operator does, through the NATS API, under a running scanner. A
// scanner that does not verify goes on silently in each: nats.go re-creates
// its consumer after the last sequence delivered, or skips what was
// removed, and the scanner delivers what comes next as if nothing happened.

// streamAdmin is an operator's JetStream connection to the server at url.
func streamAdmin(t *testing.T, url string) njs.JetStream {
	t.Helper()
	return natstest.Admin(t, url)
}

// streamOf is the stream name of channel ch in namespace ns.
func streamOf(t *testing.T, ns, ch string) string {
	t.Helper()
	name, err := jetstream.StreamName(ns, ch)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// appendN appends n messages and returns their ids.
func appendN(t *testing.T, w walimpls.WALImpls, n int, prefix string) []message.MessageID {
	t.Helper()
	ids := make([]message.MessageID, n)
	for i := range ids {
		id, err := w.Append(ctxFor(t), message.MutableMessage{Payload: []byte(fmt.Sprintf("%s%d", prefix, i))})
		if err != nil {
			t.Fatalf("append %s%d: %v", prefix, i, err)
		}
		ids[i] = id
	}
	return ids
}

// verifying opens a verifying scanner after position after, in w's
// incarnation now.
func verifying(t *testing.T, w walimpls.WALImpls, after message.MessageID, readAhead int) walimpls.ScannerImpls {
	t.Helper()
	b, err := w.Bounds(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	s, err := w.Read(ctxFor(t), walimpls.ReadOption{Name: "verify", DeliverPolicy: walimpls.DeliverStartAfter(after),
		Verify: true, Incarnation: b.Incarnation, ReadAheadBufferSize: readAhead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// take receives n messages from s.
func take(t *testing.T, s walimpls.ScannerImpls, n int) []message.MessageID {
	t.Helper()
	var ids []message.MessageID
	timeout := time.After(10 * time.Second)
	for len(ids) < n {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				t.Fatalf("scanner stopped after %d of %d: %v", len(ids), n, s.Error())
			}
			ids = append(ids, m.ID)
		case <-timeout:
			t.Fatalf("received %d of %d messages before the timeout", len(ids), n)
		}
	}
	return ids
}

// wantLost drains s until it stops and checks that it stopped on a loss,
// having delivered no id in forbidden (what a silent skip would deliver).
func wantLost(t *testing.T, s walimpls.ScannerImpls, forbidden map[message.MessageID]bool) *walimpls.LostError {
	t.Helper()
	timeout := time.After(15 * time.Second)
	var got []message.MessageID
	for {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				var lost *walimpls.LostError
				if err := s.Error(); !errors.As(err, &lost) || !errors.Is(err, walimpls.ErrChannelLost) {
					t.Fatalf("scanner stopped with %v, want a *LostError (delivered %v)", err, got)
				}
				return lost
			}
			if forbidden[m.ID] {
				t.Fatalf("the scanner delivered id %d past the loss (delivered %v): a silent skip", m.ID, got)
			}
			got = append(got, m.ID)
		case <-timeout:
			t.Fatalf("the scanner is still running after the loss (delivered %v): it does not notice", got)
		}
	}
}

func idSet(ids []message.MessageID) map[message.MessageID]bool {
	m := map[message.MessageID]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// A stream deleted and created again under a running scanner (nats stream
// rm, then a publish): its ids start over. The scanner stops with a loss
// naming both incarnations instead of delivering the new stream's messages
// above its position.
func TestVerifyingScannerStopsWhenStreamRecreated(t *testing.T) {
	url := natstest.Start(t)
	ns := freshPrefix()
	o := buildOpener(t, jetstream.Config{URL: url, Namespace: ns})
	const ch = "words/0000"
	w := openWAL(t, o, ch, 0)
	old := appendN(t, w, 5, "old-")
	before, err := w.Bounds(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	s := verifying(t, w, 0, 0)
	take(t, s, 5)
	if err := streamAdmin(t, url).DeleteStream(ctxFor(t), streamOf(t, ns, ch)); err != nil {
		t.Fatal(err)
	}
	w2 := openWAL(t, o, ch, 0) // the next publish creates the stream again
	fresh := appendN(t, w2, 8, "new-")
	lost := wantLost(t, s, idSet(fresh))
	if lost.After != old[4] || lost.Incarnation != before.Incarnation {
		t.Fatalf("loss %+v: want the position %d of incarnation %s", lost, old[4], before.Incarnation)
	}
	if !lost.Gone && lost.Now.Incarnation == before.Incarnation {
		t.Fatalf("loss %+v: the channel's incarnation did not change", lost)
	}
}

// Messages removed ahead of a running scanner before it read them — by a
// purge (nats stream purge --keep) or by a limit (nats stream edit
// --max-msgs) — stop it at the gap, before it delivers what follows.
func TestVerifyingScannerStopsAtRemovedMessages(t *testing.T) {
	url := natstest.Start(t)
	for _, tc := range []struct {
		name   string
		remove func(ctx context.Context, st njs.Stream, js njs.JetStream) error
	}{
		{"purge", func(ctx context.Context, st njs.Stream, _ njs.JetStream) error {
			return st.Purge(ctx, njs.WithPurgeKeep(5))
		}},
		{"max-msgs", func(ctx context.Context, st njs.Stream, js njs.JetStream) error {
			cfg := st.CachedInfo().Config
			cfg.MaxMsgs = 5
			_, err := js.UpdateStream(ctx, cfg)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := freshPrefix()
			o := buildOpener(t, jetstream.Config{URL: url, Namespace: ns})
			const ch = "events/0003"
			w := openWAL(t, o, ch, 0)
			read := appendN(t, w, 5, "read-")
			// One message in flight at a time, and the test stops taking
			// them: the scanner stays behind what follows.
			s := verifying(t, w, 0, 1)
			take(t, s, 5)
			unread := appendN(t, w, 20, "unread-")
			js := streamAdmin(t, url)
			st, err := js.Stream(ctxFor(t), streamOf(t, ns, ch))
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.remove(ctxFor(t), st, js); err != nil {
				t.Fatal(err)
			}
			// The first few unread ids may be with the client already;
			// the kept five must not come after a gap.
			lost := wantLost(t, s, idSet(unread[15:]))
			if lost.After < read[4] || lost.Now.First != unread[15] {
				t.Fatalf("loss %+v: want a position at or after %d and the channel's first id %d", lost, read[4], unread[15])
			}
		})
	}
}

// A NATS store restored from an older copy (the server stopped, its store
// directory copied back, the server started again) keeps the stream's
// incarnation but goes backwards: a scanner past the restored end stops
// after the reconnect, before the stream grows past its position again and
// numbers new messages with ids it has consumed.
func TestVerifyingScannerStopsWhenStoreRestored(t *testing.T) {
	dir, backup := t.TempDir(), filepath.Join(t.TempDir(), "backup")
	port := freeport.Port(t)
	srv := natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})
	o := buildOpener(t, jetstream.Config{URL: srv.URL()})
	const ch = "words/0002"
	w := openWAL(t, o, ch, 0)
	appendN(t, w, 5, "kept-")
	srv.Shutdown()
	if err := os.CopyFS(backup, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	srv = natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})
	later := appendN(t, w, 5, "later-")
	s := verifying(t, w, 0, 0)
	take(t, s, 10)

	srv.Shutdown()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dir, os.DirFS(backup)); err != nil {
		t.Fatal(err)
	}
	natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})
	waitfor.Until(t, 20*time.Second, "the scanner to stop after the restore", func() (bool, string) {
		select {
		case <-s.Done():
			return true, ""
		default:
			return false, "still running"
		}
	})
	// New messages take the restored stream past the position again.
	renumbered := appendN(t, w, 8, "new-")
	lost := wantLost(t, s, idSet(renumbered))
	if lost.After != later[4] || lost.Now.Last >= later[4] {
		t.Fatalf("loss %+v: want the position %d above the restored last id", lost, later[4])
	}
}
