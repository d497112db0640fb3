package wal_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

var jsPrefix atomic.Int64

// freshJSPrefix gives a test its own channel namespace on a server.
func freshJSPrefix() string { return "w" + strconv.FormatInt(jsPrefix.Add(1), 10) }

// jetstreamOpener is an adaptor opener over its own NATS connection.
func jetstreamOpener(t testing.TB, url, prefix string) wal.Opener {
	t.Helper()
	b := jetstream.NewBuilder(jetstream.Config{URL: url, Namespace: prefix})
	op, err := wal.NewOpenerBuilder(b).Build()
	if err != nil {
		t.Fatalf("build jetstream opener: %v", err)
	}
	t.Cleanup(op.Close)
	return op
}

// TestJetStreamPipelinedFencedWriter drives the adaptor's pipelined path over
// the real JetStream backend: a fenced writer's async appends are stored in
// call order, and a newer term fences it through the adaptor.
func TestJetStreamPipelinedFencedWriter(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nats-server")
	}
	url := natstest.Start(t)
	prefix := freshJSPrefix()
	op := jetstreamOpener(t, url, prefix)
	ctx := context.Background()
	w1, err := op.Open(ctx, &wal.OpenOption{Channel: "recovery/js", Term: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	const n = 2000
	var wg sync.WaitGroup
	wg.Add(n)
	ids := make([]message.MessageID, n)
	for i := 0; i < n; i++ {
		w1.AppendAsync(ctx, msg(strconv.Itoa(i)), func(r *wal.AppendResult, err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("append %d: %v", i, err)
				return
			}
			ids[i] = r.MessageID
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i := 1; i < n; i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("append %d got id %d after %d", i, ids[i], ids[i-1])
		}
	}
	got := readAll(t, w1)
	if len(got) != n {
		t.Fatalf("read %d, want %d", len(got), n)
	}
	for i, m := range got {
		if string(m.Payload) != strconv.Itoa(i) || m.ID != ids[i] || m.Properties["v"] != strconv.Itoa(i) {
			t.Fatalf("position %d: id %d payload %q, want id %d payload %d", i, m.ID, m.Payload, ids[i], i)
		}
	}

	// A second process (its own connection) takes over with term 2.
	op2 := jetstreamOpener(t, url, prefix)
	w2, err := op2.Open(ctx, &wal.OpenOption{Channel: "recovery/js", Term: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if _, err := w1.Append(ctx, msg("stale")); !errors.Is(err, wal.ErrFenced) {
		t.Fatalf("append of the old term: %v, want ErrFenced", err)
	}
	if w1.IsAvailable() {
		t.Fatal("fenced WAL still available")
	}
	if _, err := w2.Append(ctx, msg("new")); err != nil {
		t.Fatalf("append of the new term: %v", err)
	}
}
