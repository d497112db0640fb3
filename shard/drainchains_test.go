package shard

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// bothPartitions is txns 1..n, each one output on out/0000 and one on
// out/0001.
func bothPartitions(n int) []*outTxn {
	var out []*outTxn
	for txn := 1; txn <= n; txn++ {
		t := &outTxn{txn: uint64(txn), epoch: "e1"}
		for p := range 2 {
			t.outputs = append(t.outputs, output{channel: fmt.Sprintf("out/%04d", p), msg: messageOf(fmt.Sprintf("t%d-%d", txn, p))})
		}
		out = append(out, t)
	}
	return out
}

// TestStuckPartitionDoesNotBlockOthers: appends to out/0001 hang (its
// stream has no leader, say) while a primary commits transactions with
// outputs on out/0000 and out/0001. out/0000 gets every one of them
// meanwhile; the published watermark (what the outbox records as out)
// stays before the stuck partition's first, and the gauge counts them all
// as unpublished. Once out/0001 takes appends again it catches up, in
// order, and the watermark and the gauge follow.
func TestStuckPartitionDoesNotBlockOthers(t *testing.T) {
	mem := memory.NewBuilder()
	gate := make(chan struct{})
	var release sync.Once
	defer release.Do(func() { close(gate) }) // also when the test fails midway
	mem.SetAppendHook(func(ch string, _ *message.MutableMessage, st memory.Stage) error {
		if ch == "out/0001" && st == memory.BeforeStore {
			<-gate
		}
		return nil
	})
	op, err := wal.NewOpenerBuilder(mem).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "unpublished"})
	d := newDrainer(drainConfig{shard: "s", opener: op, gauge: gauge}, 0, realClock{})
	d.stuckAfter = 20 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go d.run(ctx, ptr(listBacklog(nil)))
	const n = 6
	txns := bothPartitions(n)
	for i, tx := range txns { // one group each: each waits for the one before
		if err := d.enqueue(ctx, tx); err != nil {
			t.Fatal(err)
		}
		waitfor.Until(t, 10*time.Second, "out/0000 to get the transaction's output while out/0001 is stuck", func() (bool, string) {
			got := readChannel(t, op, "out/0000")
			return len(got) == i+1, fmt.Sprintf("out/0000 holds %d of %d (one stuck partition blocks the others)", len(got), i+1)
		})
	}
	if p := d.published.Load(); p != 0 {
		t.Fatalf("watermark at txn %d while out/0001 has none of its outputs", p)
	}
	if v := gaugeValue(t, gauge); v != n {
		t.Fatalf("unpublished gauge %v, want %d", v, n)
	}
	release.Do(func() { close(gate) })
	waitfor.Until(t, 30*time.Second, "the watermark at the last txn", func() (bool, string) {
		return d.published.Load() == n, fmt.Sprintf("at %d", d.published.Load())
	})
	close(d.queue)
	<-d.done
	if d.err != nil {
		t.Fatal(d.err)
	}
	if v := gaugeValue(t, gauge); v != 0 {
		t.Fatalf("unpublished gauge %v once all is out, want 0", v)
	}
	var want []string
	for _, tx := range txns {
		want = append(want, string(tx.outputs[1].msg.Payload))
	}
	if got := readChannel(t, op, "out/0001"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("out/0001 holds %v, want %v", got, want)
	}
}

// TestBacklogInPages: a backlog of outbox rows larger than a page (more
// txns than backlogPageTxns, and rows past backlogPageBytes) is read a
// page at a time, whole transactions each, and a drainer publishes all of
// it once, in order.
func TestBacklogInPages(t *testing.T) {
	sd, err := openShardDB(t.TempDir()+"/db", nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	const pageTxns, pageBytes = 8, 64 << 10
	const txns = 2*pageTxns + 7
	big := make([]byte, pageBytes/4)
	batch := grocksdb.NewWriteBatch()
	defer batch.Destroy()
	var want []string
	for txn := uint64(1); txn <= txns; txn++ {
		row := []byte{outboxRowV2}
		msg := messageOf(fmt.Sprintf("t%d", txn))
		if txn%5 == 0 { // some txns of 6 rows, over a page's bytes
			for i := range 6 {
				m := message.MutableMessage{Key: "big", Payload: append([]byte(fmt.Sprintf("t%d-%d:", txn, i)), big...)}
				r, _ := appendOutput([]byte{outboxRowV2}, "out/0000", &m)
				batch.Put(outboxKey(txn, i), r)
			}
			want = append(want, fmt.Sprint(txn, "x6"))
			continue
		}
		row, _ = appendOutput(row, "out/0000", &msg)
		batch.Put(outboxKey(txn, 0), row)
		want = append(want, fmt.Sprint(txn, "x1"))
	}
	if err := sd.db.Write(sd.wo, batch); err != nil {
		t.Fatal(err)
	}
	backlog := func() *outboxBacklog {
		b := newOutboxBacklog(sd.db, sd.ro, &outboxState{published: 0, last: txns, epoch: "e1"})
		b.pageTxns, b.pageBytes = pageTxns, pageBytes
		return b
	}
	b := backlog()
	var got []string
	var all []*outTxn
	pages := 0
	for {
		p, err := b.page()
		if err != nil {
			t.Fatal(err)
		}
		if len(p) == 0 {
			break
		}
		pages++
		size := 0
		for i, tx := range p {
			got = append(got, fmt.Sprint(tx.txn, "x", len(tx.outputs)))
			if i < len(p)-1 {
				for _, o := range tx.outputs {
					size += len(o.msg.Payload)
				}
			}
		}
		if len(p) > pageTxns || size >= pageBytes {
			t.Fatalf("page %d: %d txns, %d bytes before its last txn: over a page", pages, len(p), size)
		}
		all = append(all, p...)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("paged %v\nwant %v", got, want)
	}
	if pages < 4 {
		t.Fatalf("%d pages for %d txns: not paged", pages, txns)
	}
	op, err := wal.NewOpenerBuilder(memory.NewBuilder()).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	d := testDrainer(op, txns)
	close(d.queue)
	d.run(context.Background(), backlog())
	if d.err != nil {
		t.Fatal(d.err)
	}
	var n int
	for _, tx := range all {
		n += len(tx.outputs)
	}
	if out := readChannel(t, op, "out/0000"); len(out) != n {
		t.Fatalf("published %d messages, want %d", len(out), n)
	}
}
