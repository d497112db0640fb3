package walimplstest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// Helpers of the suite: openers, appends and bounded reads.

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func build(t testing.TB, b walimpls.OpenerBuilderImpls) walimpls.OpenerImpls {
	t.Helper()
	o, err := b.Build()
	if err != nil {
		t.Fatalf("Build %s: %v", b.Name(), err)
	}
	return o
}

func open(t testing.TB, ctx context.Context, o walimpls.OpenerImpls, ch string, term uint64) walimpls.WALImpls {
	t.Helper()
	w, err := o.Open(ctx, &walimpls.OpenOption{Channel: ch, Term: term})
	if err != nil {
		t.Fatalf("Open %q term %d: %v", ch, term, err)
	}
	if w.Channel() != ch {
		t.Fatalf("Open %q: Channel() = %q", ch, w.Channel())
	}
	return w
}

func appendOne(t testing.TB, ctx context.Context, w walimpls.WALImpls, payload string) message.MessageID {
	t.Helper()
	id, err := w.Append(ctx, message.MutableMessage{Key: "k-" + payload, Payload: []byte(payload),
		Properties: map[string]string{"p": payload}})
	if err != nil {
		t.Fatalf("Append %q to %q: %v", payload, w.Channel(), err)
	}
	if id == 0 {
		t.Fatalf("Append %q to %q: id 0", payload, w.Channel())
	}
	return id
}

func appendN(t testing.TB, ctx context.Context, w walimpls.WALImpls, n int, prefix string) []message.MessageID {
	t.Helper()
	ids := make([]message.MessageID, n)
	for i := range ids {
		ids[i] = appendOne(t, ctx, w, fmt.Sprintf("%s%d", prefix, i))
		if i > 0 && ids[i] <= ids[i-1] {
			t.Fatalf("Append %d to %q: id %d not above previous %d", i, w.Channel(), ids[i], ids[i-1])
		}
	}
	return ids
}

func read(t testing.TB, ctx context.Context, w walimpls.WALImpls, p walimpls.DeliverPolicy) walimpls.ScannerImpls {
	t.Helper()
	s, err := w.Read(ctx, walimpls.ReadOption{Name: "conformance", DeliverPolicy: p})
	if err != nil {
		t.Fatalf("Read %q at %+v: %v", w.Channel(), p, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// receive reads exactly n messages, failing on a stop or a stall.
func receive(t testing.TB, s walimpls.ScannerImpls, n int) []message.ImmutableMessage {
	t.Helper()
	out := make([]message.ImmutableMessage, 0, n)
	timer := time.NewTimer(receiveTimeout)
	defer timer.Stop()
	for len(out) < n {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				<-s.Done()
				t.Fatalf("scanner stopped after %d of %d messages: %v", len(out), n, s.Error())
			}
			if len(out) > 0 && m.ID <= out[len(out)-1].ID {
				t.Fatalf("scanner delivered id %d after %d: not strictly increasing", m.ID, out[len(out)-1].ID)
			}
			out = append(out, m)
		case <-timer.C:
			t.Fatalf("scanner stalled: %d of %d messages within %v", len(out), n, receiveTimeout)
		}
	}
	return out
}

// expectQuiet fails if the scanner delivers anything or stops within quietPeriod.
func expectQuiet(t testing.TB, s walimpls.ScannerImpls) {
	t.Helper()
	timer := time.NewTimer(quietPeriod)
	defer timer.Stop()
	select {
	case m, ok := <-s.Chan():
		if !ok {
			<-s.Done()
			t.Fatalf("scanner stopped, expected it to wait: %v", s.Error())
		}
		t.Fatalf("scanner delivered id %d (payload %q), expected nothing", m.ID, m.Payload)
	case <-timer.C:
	}
}

func ids(ms []message.ImmutableMessage) []message.MessageID {
	out := make([]message.MessageID, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func equalIDs(a, b []message.MessageID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// waitStopped waits (bounded) for the scanner to stop and returns its Error.
func waitStopped(t testing.TB, s walimpls.ScannerImpls, d time.Duration) error {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(d):
		t.Fatalf("scanner did not stop within %v", d)
	}
	// Chan must be closed once Done is; drain what was buffered.
	for range s.Chan() {
	}
	return s.Error()
}
