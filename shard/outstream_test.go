package shard

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"

	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// The operator's side of an output stream that loses the shard's markers:
// the NATS API deletes and re-creates it, or purges it, under drainers.

// oneEach is txns 1..n of epoch e1, each one output "t<txn>" on out/0000.
func oneEach(n int) []*outTxn {
	var out []*outTxn
	for txn := 1; txn <= n; txn++ {
		out = append(out, &outTxn{txn: uint64(txn), epoch: "e1", outputs: []output{{channel: "out/0000",
			msg: messageOf(fmt.Sprintf("t%d", txn))}}})
	}
	return out
}

// jsOpener is a JetStream opener of its own connection, closed at cleanup.
func jsOpener(t *testing.T, url string) wal.Opener {
	t.Helper()
	op, err := wal.NewOpenerBuilder(jetstream.NewBuilder(jetstream.Config{URL: url})).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	return op
}

// outStream is the operator's handle on out/0000's stream.
func outStream(t *testing.T, url string) (njs.JetStream, string) {
	t.Helper()
	name, err := jetstream.StreamName(jetstream.DefaultNamespace, "out/0000")
	if err != nil {
		t.Fatal(err)
	}
	return natstest.Admin(t, url), name
}

// recreateStream is `nats stream rm` then `nats stream add` with the same
// configuration: a new stream, its sequences from 1.
func recreateStream(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	js, name := outStream(t, url)
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if err := js.DeleteStream(ctx, name); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // the creation time (the incarnation) has ns precision; make sure it moves
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

func lostCount() float64 {
	var m dto.Metric
	if err := metricOutputMarkersLost.WithLabelValues("s", "out/0000").Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// TestRecreatedOutputStreamUnderZombie: a zombie primary's drainer holds
// the id of its last marker (4) in the output stream; the operator deletes
// and re-creates the stream; the new primary publishes txns 1 and 2, its
// marker for txn 2 landing at id 4 of the new stream. The zombie's next
// batch (txn 4) must not match that marker: the chains are bound to the
// stream's incarnation, so it finds its chain gone and stops, and the new
// primary publishes txns 3..5 — every output once, none skipped. The new
// primary reports the markers the shard recorded as lost.
func TestRecreatedOutputStreamUnderZombie(t *testing.T) {
	url := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	txns := oneEach(5)
	z := testDrainer(jsOpener(t, url), 100)
	defer z.shutdown()
	if err := z.publish(ctx, txns[:3]); err != nil { // t1..t3 at ids 1..3, the marker at 4
		t.Fatal(err)
	}
	rec := z.takeMarks()["out/0000"]
	if rec.id != 4 || rec.epoch != "e1" || rec.inc == "" {
		t.Fatalf("the zombie's record of out/0000: %+v, want marker id 4 of epoch e1 and an incarnation", rec)
	}
	recreateStream(t, url)

	before := lostCount()
	nop := jsOpener(t, url)
	n := newDrainer(drainConfig{shard: "s", opener: nop, ownLast: 100, records: map[string]chanRecord{"out/0000": rec}}, 0, realClock{})
	defer n.shutdown()
	for _, g := range [][]*outTxn{txns[0:1], txns[1:2]} { // markers at ids 2 and 4
		if err := n.publish(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	if got := lostCount() - before; got != 1 {
		t.Errorf("the new primary reported %v lost chains, want 1 (the stream was re-created under the recorded markers)", got)
	}
	zerr := z.publish(ctx, txns[3:4])
	if err := n.publish(ctx, txns[2:5]); err != nil {
		t.Fatal(err)
	}
	got := readChannel(t, nop, "out/0000")
	if fmt.Sprint(got) != "[t1 t2 t3 t4 t5]" {
		t.Fatalf("the new stream holds %v, want [t1 t2 t3 t4 t5] (the zombie's batch matched the new stream's marker)", got)
	}
	if !errors.Is(zerr, errChainWentBack) || !isTransient(zerr) {
		t.Fatalf("the zombie's publish: %v, want a transient %v", zerr, errChainWentBack)
	}
}

// TestPurgedOutputStreamReported: the operator purges the output stream
// (`nats stream purge`) after a primary published txns 1..3; its successor
// holds txns 3..5 in the outbox (txn 3 not recorded as published). Its
// chain's recorded marker is gone, so nothing says txn 3 is out: it is
// published again, and that is reported (the metric, an ERROR log), not
// silent.
func TestPurgedOutputStreamReported(t *testing.T) {
	url := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	txns := oneEach(5)
	a := testDrainer(jsOpener(t, url), 5)
	defer a.shutdown()
	if err := a.publish(ctx, txns[:3]); err != nil {
		t.Fatal(err)
	}
	rec := a.takeMarks()["out/0000"]
	js, name := outStream(t, url)
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	before := lostCount()
	op := jsOpener(t, url)
	b := newDrainer(drainConfig{shard: "s", opener: op, ownLast: 5, records: map[string]chanRecord{"out/0000": rec}}, 2, realClock{})
	defer b.shutdown()
	if err := b.publish(ctx, txns[2:]); err != nil {
		t.Fatal(err)
	}
	if got := lostCount() - before; got != 1 {
		t.Errorf("reported %v lost chains, want 1: the recorded marker %d was purged", got, rec.id)
	}
	if got := readChannel(t, op, "out/0000"); fmt.Sprint(got) != "[t3 t4 t5]" {
		t.Fatalf("the purged stream holds %v, want [t3 t4 t5]", got)
	}
}

func messageOf(payload string) message.MutableMessage {
	return message.MutableMessage{Key: payload, Payload: []byte(payload)}
}
