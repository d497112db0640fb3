package walimplstest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// The Batch section: walimpls.BatchAppender's atomic, chained batches.

func batchAppender(t testing.TB, w walimpls.WALImpls) walimpls.BatchAppender {
	t.Helper()
	b, ok := w.(walimpls.BatchAppender)
	if !ok {
		t.Skipf("%s WALs do not implement walimpls.BatchAppender", w.WALName())
	}
	return b
}

func batchOf(tag string, n int) []message.MutableMessage {
	out := make([]message.MutableMessage, n)
	for i := range out {
		out[i] = message.MutableMessage{Key: fmt.Sprintf("%s-k%d", tag, i), Payload: []byte(fmt.Sprintf("%s-%d", tag, i)),
			Properties: map[string]string{"batch": tag}}
	}
	return out
}

func payloadsOf(ms []message.ImmutableMessage) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Payload)
	}
	return out
}

// testBatchChain: batches land whole, markers are invisible to scanners and
// LastID, a stale position is rejected with nothing stored, a retry of a
// batch that landed is rejected (its marker is the chain's last), and chains
// are independent.
func testBatchChain(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-batch/0000", 0)
	defer w.Close()
	ba := batchAppender(t, w)
	if m, err := ba.LastMarker(ctx, "shard-a"); err != nil || m.ID != 0 {
		t.Fatalf("LastMarker of a new chain = %+v, %v; want id 0", m, err)
	}
	r1, err := ba.AppendBatch(ctx, walimpls.Batch{Messages: batchOf("b1", 3), Chain: "shard-a", Marker: []byte("txn-1")})
	if err != nil {
		t.Fatalf("first batch: %v", err)
	}
	if r1.FirstID == 0 || r1.MarkerID <= r1.FirstID {
		t.Fatalf("first batch result %+v: want a first id and a marker after it", r1)
	}
	if m, err := ba.LastMarker(ctx, "shard-a"); err != nil || m.ID != r1.MarkerID || string(m.Payload) != "txn-1" {
		t.Fatalf("LastMarker after the first batch = %+v, %v; want id %d payload txn-1", m, err, r1.MarkerID)
	}
	// Stale: expects no marker, but the chain has one. Nothing stored.
	_, err = ba.AppendBatch(ctx, walimpls.Batch{Messages: batchOf("stale", 2), Chain: "shard-a", Marker: []byte("txn-x")})
	if !errors.Is(err, walimpls.ErrStaleChain) {
		t.Fatalf("batch at a stale position: %v, want ErrStaleChain", err)
	}
	r2, err := ba.AppendBatch(ctx, walimpls.Batch{Messages: batchOf("b2", 2), Chain: "shard-a", Marker: []byte("txn-2"), After: r1.MarkerID})
	if err != nil {
		t.Fatalf("second batch: %v", err)
	}
	// A retry of the second batch (its first attempt landed): rejected, and
	// LastMarker tells the writer it is there.
	if _, err := ba.AppendBatch(ctx, walimpls.Batch{Messages: batchOf("b2", 2), Chain: "shard-a", Marker: []byte("txn-2"), After: r1.MarkerID}); !errors.Is(err, walimpls.ErrStaleChain) {
		t.Fatalf("retried batch: %v, want ErrStaleChain", err)
	}
	if m, _ := ba.LastMarker(ctx, "shard-a"); m.ID != r2.MarkerID || string(m.Payload) != "txn-2" {
		t.Fatalf("LastMarker after the retry = %+v, want the second batch's", m)
	}
	// Another chain on the same channel starts from nothing.
	rb, err := ba.AppendBatch(ctx, walimpls.Batch{Messages: batchOf("other", 1), Chain: "shard-b", Marker: []byte("b-1")})
	if err != nil {
		t.Fatalf("a second chain's first batch: %v", err)
	}
	// An empty batch is a marker alone.
	re, err := ba.AppendBatch(ctx, walimpls.Batch{Chain: "shard-b", Marker: []byte("b-2"), After: rb.MarkerID})
	if err != nil || re.FirstID != 0 || re.MarkerID <= rb.MarkerID {
		t.Fatalf("empty batch: %+v, %v; want only a marker", re, err)
	}
	plain := appendOne(t, ctx, w, "plain")

	got := receive(t, read(t, ctx, w, walimpls.DeliverAll()), 7)
	want := []string{"b1-0", "b1-1", "b1-2", "b2-0", "b2-1", "other-0", "plain"}
	if fmt.Sprint(payloadsOf(got)) != fmt.Sprint(want) {
		t.Fatalf("read back %v, want %v (each batch once, no markers)", payloadsOf(got), want)
	}
	if got[0].ID != r1.FirstID || got[3].ID != r2.FirstID || got[0].Key != "b1-k0" || got[0].Properties["batch"] != "b1" {
		t.Fatalf("batch messages read back as %+v", got[:4])
	}
	if last, err := w.LastID(ctx); err != nil || last != plain {
		t.Fatalf("LastID = %d, %v; want %d (markers are not messages)", last, err, plain)
	}
	if c, ok := w.(walimpls.Counter); ok {
		if n, err := c.Count(ctx); err != nil || n != 7 {
			t.Fatalf("Count = %d, %v; want 7 (markers are not messages)", n, err)
		}
	}
	if _, err := ba.AppendBatch(ctx, walimpls.Batch{Messages: batchOf("big", ba.MaxBatch()+1), Chain: "shard-c", Marker: []byte("x")}); err == nil || walimpls.IsRetryable(err) {
		t.Fatalf("batch of MaxBatch+1 messages: %v, want a permanent error", err)
	}
}

// testBatchRace: two writers (separate connections) append the same batch at
// the same chain position at once, as a zombie primary and its successor
// draining the same committed outputs: it is stored exactly once.
func testBatchRace(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	const ch = "conf-batch-race/0000"
	o1, o2 := build(t, b), build(t, b)
	defer o1.Close()
	defer o2.Close()
	w1, w2 := open(t, ctx, o1, ch, 0), open(t, ctx, o2, ch, 0)
	defer w1.Close()
	defer w2.Close()
	ba1, ba2 := batchAppender(t, w1), batchAppender(t, w2)
	const rounds = 20
	var after message.MessageID
	stored := 0
	for r := 0; r < rounds; r++ {
		batch := walimpls.Batch{Messages: batchOf(fmt.Sprintf("r%d", r), 4), Chain: "shard", Marker: []byte(fmt.Sprint(r)), After: after}
		var wg sync.WaitGroup
		var res [2]walimpls.BatchResult
		var errs [2]error
		for i, ba := range []walimpls.BatchAppender{ba1, ba2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i], errs[i] = ba.AppendBatch(context.WithoutCancel(ctx), batch)
			}()
		}
		wg.Wait()
		ok := 0
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
				after = res[i].MarkerID
			case !errors.Is(err, walimpls.ErrStaleChain):
				t.Fatalf("round %d writer %d: %v, want success or ErrStaleChain", r, i, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d writers stored the batch, want exactly 1", r, ok)
		}
		stored += len(batch.Messages)
	}
	got := receive(t, read(t, ctx, w1, walimpls.DeliverAll()), stored)
	seen := map[string]bool{}
	for _, m := range got {
		if seen[string(m.Payload)] {
			t.Fatalf("message %q stored twice", m.Payload)
		}
		seen[string(m.Payload)] = true
	}
	expectQuiet(t, read(t, ctx, w1, walimpls.DeliverStartAfter(got[len(got)-1].ID)))
}
