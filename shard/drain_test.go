package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/retry"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// committedOutputs is what a shard committed: txns 1..n, each with outputs
// to two partitions, one txn big enough to span several batches.
func committedOutputs(n, perTxn int) []*outTxn {
	var out []*outTxn
	for txn := 1; txn <= n; txn++ {
		t := &outTxn{txn: uint64(txn), epoch: "e1"}
		k := perTxn
		if txn == 3 {
			k = 2*memory.MaxBatch + 5 // three chunks per partition
		}
		for i := 0; i < k; i++ {
			t.outputs = append(t.outputs, output{
				channel: fmt.Sprintf("out/%04d", i%2),
				msg:     message.MutableMessage{Key: fmt.Sprint(i), Payload: []byte(fmt.Sprintf("t%d-%d", txn, i))},
			})
		}
		out = append(out, t)
	}
	return out
}

// testDrainer is a drainer of shard "s" whose last committed txn is ownLast.
func testDrainer(op wal.Opener, ownLast uint64) *drainer {
	return newDrainer(drainConfig{shard: "s", opener: op, ownLast: ownLast}, 0, realClock{})
}

func ptr[T any](v T) *T { return &v }

func readChannel(t *testing.T, op wal.Opener, ch string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := op.Open(ctx, &wal.OpenOption{Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	last, err := w.LastID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if last == 0 {
		return got
	}
	s, err := w.Read(ctx, wal.ReadOption{Name: "test", DeliverPolicy: wal.DeliverAll()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for m := range s.Chan() {
		got = append(got, string(m.Payload))
		if m.ID >= last {
			break
		}
	}
	return got
}

// TestDrainersRace: a zombie primary and its successor drain the same
// committed outputs at once, from separate connections: every output lands
// exactly once, in transaction order per partition.
func TestDrainersRace(t *testing.T) {
	for round := 0; round < 5; round++ {
		mem := memory.NewBuilder()
		mem.ShuffleAcks(uint64(round + 1))
		var ops []wal.Opener
		for range 2 {
			op, err := wal.NewOpenerBuilder(mem).Build()
			if err != nil {
				t.Fatal(err)
			}
			defer op.Close()
			ops = append(ops, op)
		}
		txns := committedOutputs(8, 7)
		var wg sync.WaitGroup
		for i, op := range ops {
			d := testDrainer(op, 1000)
			close(d.queue) // both drain the pending list, then stop
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i == 0 {
					d.run(context.Background(), ptr(listBacklog(txns))) // all in one group
				} else {
					// In groups of 3: batches end elsewhere than the other
					// drainer's, so the chain it finds may cover part of one.
					for g := 0; g < len(txns); g += 3 {
						if err := d.publish(context.Background(), txns[g:min(g+3, len(txns))]); err != nil {
							t.Errorf("drainer %d: %v", i, err)
						}
					}
					d.shutdown()
				}
				if d.err != nil {
					t.Errorf("drainer %d: %v", i, d.err)
				}
			}()
		}
		wg.Wait()
		for _, ch := range []string{"out/0000", "out/0001"} {
			got := readChannel(t, ops[0], ch)
			var want []string
			for _, tx := range txns {
				for _, o := range tx.outputs {
					if o.channel == ch {
						want = append(want, string(o.msg.Payload))
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("round %d %s: %d messages, want %d exactly once in order (first difference at %d)", round, ch, len(got), len(want), firstDiff(got, want))
			}
		}
	}
}

// TestDrainerResumesAfterPublished: a new primary skips what the chain's
// last marker says is out, and publishes the rest.
func TestDrainerResumesAfterPublished(t *testing.T) {
	mem := memory.NewBuilder()
	op, err := wal.NewOpenerBuilder(mem).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	txns := committedOutputs(6, 3)
	run := func(pending []*outTxn) {
		d := testDrainer(op, 1000)
		close(d.queue)
		d.run(context.Background(), ptr(listBacklog(pending)))
		if d.err != nil {
			t.Fatal(d.err)
		}
	}
	run(txns[:4]) // the old primary got through txn 4
	run(txns)     // its successor starts over from txn 1
	for _, ch := range []string{"out/0000", "out/0001"} {
		got := readChannel(t, op, ch)
		seen := map[string]bool{}
		for _, p := range got {
			if seen[p] {
				t.Fatalf("%s: %s published twice", ch, p)
			}
			seen[p] = true
		}
		var want int
		for _, tx := range txns {
			for _, o := range tx.outputs {
				if o.channel == ch {
					want++
				}
			}
		}
		if len(got) != want {
			t.Fatalf("%s: %d messages, want %d", ch, len(got), want)
		}
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestGatherLingersOnlyWhenAsked: after a quiet spell the drainer takes
// what is queued and goes, without waiting; when it published less than a
// linger ago it waits out the linger for more (on the real clock: the
// decisions themselves are in testdata/coalesce).
func TestGatherLingersOnlyWhenAsked(t *testing.T) {
	d := testDrainer(nil, 0)
	first := &outTxn{txn: 1}
	d.queue <- &outTxn{txn: 2}
	start := time.Now()
	if g := d.gather(context.Background(), first, time.Time{}); len(g) != 2 {
		t.Fatalf("after a quiet spell gathered %d transactions, want the 2 queued", len(g))
	}
	if took := time.Since(start); took >= drainLinger {
		t.Fatalf("after a quiet spell took %v, want no wait", took)
	}
	start = time.Now()
	if g := d.gather(context.Background(), first, start); len(g) != 1 {
		t.Fatalf("lingering gathered %d transactions from an empty queue", len(g))
	}
	if took := time.Since(start); took < drainLinger {
		t.Fatalf("lingering returned after %v, want at least %v", took, drainLinger)
	}
}

// TestPublishRetriedByOneLayer: a failed output append is retried by one
// layer, the WAL adaptor's retry policy (here 3 attempts), never by the
// drainer around it. An outage that outlasts the adaptor's attempts reaches
// the backend exactly that often and stops the drainer with an error the
// replica's rule counts as transient (it restarts); a shorter one, or a
// lost acknowledgement (the retry finds the chain moved: the drainer reads
// the marker), publishes each output once.
func TestPublishRetriedByOneLayer(t *testing.T) {
	const adaptorAttempts = 3
	for _, tc := range []struct {
		name     string
		fail     int32 // the first attempts that fail before storing
		loseAck  bool  // the first stored batch's acknowledgement is lost
		attempts int32 // the attempts the backend sees
		err      bool  // the drainer stops with the adaptor's exhaustion
	}{
		{name: "outage longer than the retries", fail: 1 << 30, attempts: adaptorAttempts, err: true},
		{name: "outage shorter than the retries", fail: adaptorAttempts - 1, attempts: adaptorAttempts},
		{name: "lost acknowledgement", loseAck: true, attempts: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.NewBuilder()
			var attempts atomic.Int32
			var ackLost atomic.Bool
			extra := make(chan struct{}) // closed at an attempt beyond the expected
			mem.SetAppendHook(func(ch string, msg *message.MutableMessage, st memory.Stage) error {
				if ch != "out/0000" {
					return nil
				}
				if st == memory.AfterStore {
					if tc.loseAck && ackLost.CompareAndSwap(false, true) {
						return errors.New("injected: nats: timeout")
					}
					return nil
				}
				n := attempts.Add(1)
				if n == tc.attempts+1 {
					close(extra)
				}
				if n <= tc.fail {
					return errors.New("injected: nats: connection closed")
				}
				return nil
			})
			op, err := wal.NewOpenerBuilder(mem, wal.WithRetry(time.Millisecond, time.Millisecond, adaptorAttempts)).Build()
			if err != nil {
				t.Fatal(err)
			}
			defer op.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			d := testDrainer(op, 1000)
			close(d.queue) // it publishes the pending transaction, then stops
			pending := []*outTxn{{txn: 1, epoch: "e1", outputs: []output{
				{channel: "out/0000", msg: message.MutableMessage{Key: "k", Payload: []byte("once")}},
			}}}
			go d.run(ctx, ptr(listBacklog(pending)))
			select {
			case <-d.done:
			case <-extra:
				cancel()
				<-d.done
				t.Fatalf("the backend saw a publish attempt beyond the adaptor's %d: a second layer retried", tc.attempts)
			}
			if n := attempts.Load(); n != tc.attempts {
				t.Fatalf("%d attempts reached the backend, want %d", n, tc.attempts)
			}
			if !tc.err {
				if d.err != nil {
					t.Fatal(d.err)
				}
				if got := readChannel(t, op, "out/0000"); fmt.Sprint(got) != "[once]" {
					t.Fatalf("out/0000 holds %q, want the output once", got)
				}
				return
			}
			if !errors.Is(d.err, retry.ErrExhausted) {
				t.Fatalf("the drainer stopped with %v, want the adaptor's retry.ErrExhausted", d.err)
			}
			if !isTransient(fmt.Errorf("publishing outputs: %w", d.err)) {
				t.Fatalf("%v is not transient: the replica would fail instead of restarting", d.err)
			}
		})
	}
}
