package jetstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// A connection has at most Config.MaxBatchesInFlight atomic batches in
// flight: one more waits for a slot (and gives up with its context), and
// goes out once a slot is free.
func TestBatchWaitsForASlot(t *testing.T) {
	op, err := NewBuilder(Config{URL: natstest.Start(t), MaxBatchesInFlight: 2}).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	o := op.(*opener)
	if !o.atomic {
		t.Skip("the server has no atomic batches")
	}
	if cap(o.batchSlots) != 2 {
		t.Fatalf("%d batch slots, want Config.MaxBatchesInFlight 2", cap(o.batchSlots))
	}
	ctx := context.Background()
	wi, err := op.Open(ctx, &walimpls.OpenOption{Channel: "slots"})
	if err != nil {
		t.Fatal(err)
	}
	defer wi.Close()
	w := wi.(*walImpl)
	batch := walimpls.Batch{Messages: []message.MutableMessage{{Payload: []byte("x")}}, Chain: "c", Marker: []byte("1:0:1")}

	// Two batches in flight elsewhere (their slots taken).
	o.batchSlots <- struct{}{}
	o.batchSlots <- struct{}{}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := w.AppendBatch(short, batch); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third batch with no slot free: %v, want it to wait until its context ends", err)
	}
	if last, err := w.LastMarker(ctx, "c"); err != nil || last.ID != 0 {
		t.Fatalf("the batch that found no slot was stored: last marker %+v, %v", last, err)
	}

	// One finishes: the next goes out.
	<-o.batchSlots
	res, err := w.AppendBatch(ctx, batch)
	if err != nil {
		t.Fatalf("with a slot free: %v", err)
	}
	if res.MarkerID != 2 || res.FirstID != 1 {
		t.Fatalf("stored as %+v, want the message at 1 and the marker at 2", res)
	}
	if n := len(o.batchSlots); n != 1 {
		t.Fatalf("%d slots taken after the batch, want 1 (the batch gives its own back)", n)
	}
}
