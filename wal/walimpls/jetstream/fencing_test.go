package jetstream_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// Two connections (as two processes would), many interleaved conditional
// appends: once term 2 opened, term 1 is fenced for good, and only
// acknowledged appends are stored.
func TestFencingAcrossConnectionsWhilePipelining(t *testing.T) {
	t.Run("single", func(t *testing.T) { fencingWhilePipelining(t, natstest.Start(t), 1) })
	t.Run("R3", func(t *testing.T) {
		if testing.Short() {
			t.Skip("3-node cluster")
		}
		fencingWhilePipelining(t, natstest.StartCluster(t, 3), 3)
	})
}

func fencingWhilePipelining(t *testing.T, url string, replicas int) {
	o1 := buildOpener(t, jetstream.Config{URL: url, Replicas: replicas})
	o2 := buildOpener(t, jetstream.Config{URL: url, Replicas: replicas})
	const ch = "recovery/fence-pipe"
	w1 := openWAL(t, o1, ch, 1)
	ctx := ctxFor(t)

	type res struct {
		id  message.MessageID
		err error
	}
	aa := w1.(walimpls.AsyncAppender)
	results := make([]chan res, 2000)
	for i := range results {
		results[i] = make(chan res, 1)
		if i == 1000 {
			// Term 2 opens while term 1 has appends in flight.
			openWAL(t, o2, ch, 2)
		}
		c := results[i]
		aa.AppendAsync(ctx, message.MutableMessage{Payload: []byte(fmt.Sprintf("w1-%d", i))},
			func(id message.MessageID, err error) { c <- res{id, err} })
	}
	// The stored appends are a prefix of the calls: the first append the
	// fence broke is rejected, and so is every later one (chained), either
	// fenced or retryably (a re-send finds out which).
	var acked []message.MessageID
	failedFrom := -1
	for i, c := range results {
		r := <-c
		switch {
		case r.err == nil:
			if failedFrom >= 0 {
				t.Fatalf("append %d acknowledged (id %d) after append %d failed", i, r.id, failedFrom)
			}
			acked = append(acked, r.id)
		case errors.Is(r.err, walimpls.ErrFenced), walimpls.IsRetryable(r.err):
			if failedFrom < 0 {
				failedFrom = i
			}
		default:
			t.Fatalf("append %d: unexpected error %v", i, r.err)
		}
	}
	if failedFrom < 0 || failedFrom > 1000 {
		t.Fatalf("first failed append %d; want one at or before 1000 (when term 2 opened)", failedFrom)
	}
	// Once every outcome is in, a re-send resynchronises and finds the fence.
	if _, err := w1.Append(ctx, message.MutableMessage{Payload: []byte("late")}); !errors.Is(err, walimpls.ErrFenced) {
		t.Fatalf("append after fencing: %v, want ErrFenced", err)
	}
	got := readAll(t, openWAL(t, o2, ch, 0), len(acked))
	for i, m := range got {
		if m.ID != acked[i] || string(m.Payload) != fmt.Sprintf("w1-%d", i) {
			t.Fatalf("message %d: id %d payload %q; want id %d payload w1-%d", i, m.ID, m.Payload, acked[i], i)
		}
	}
}

// A writer reopened with the same term continues; a term-0 append between
// its appends makes the next one fail retryably (the chain moved), and the
// re-send resynchronises and succeeds.
func TestSameTermReopenAndForeignAppend(t *testing.T) {
	url := natstest.Start(t)
	o := buildOpener(t, jetstream.Config{URL: url})
	const ch = "recovery/same-term"
	ctx := ctxFor(t)
	w := openWAL(t, o, ch, 5)
	if _, err := w.Append(ctx, message.MutableMessage{Payload: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	intruder := openWAL(t, buildOpener(t, jetstream.Config{URL: url}), ch, 0)
	if _, err := intruder.Append(ctx, message.MutableMessage{Payload: []byte("foreign")}); err != nil {
		t.Fatal(err)
	}
	// w's chain is now stale: the append is rejected, retryably, unstored.
	if _, err := w.Append(ctx, message.MutableMessage{Payload: []byte("b"), DedupeID: "b"}); !walimpls.IsRetryable(err) {
		t.Fatalf("append after a foreign append: %v, want a retryable conflict", err)
	}
	id, err := w.Append(ctx, message.MutableMessage{Payload: []byte("b"), DedupeID: "b"})
	if err != nil {
		t.Fatalf("re-send after a foreign append: %v", err)
	}
	w2 := openWAL(t, o, ch, 5)
	id2, err := w2.Append(ctx, message.MutableMessage{Payload: []byte("c")})
	if err != nil || id2 <= id {
		t.Fatalf("append of same-term reopen: id %d, %v; want above %d", id2, err, id)
	}
	got := readAll(t, w2, 4)
	var payloads []string
	for _, m := range got {
		payloads = append(payloads, string(m.Payload))
	}
	if strings.Join(payloads, ",") != "a,foreign,b,c" {
		t.Fatalf("channel holds %v", payloads)
	}
}

// TestFenceRecordsDoNotPileUp: each new term's fence (on a server with
// atomic batches, a padded batch of records) leaves only its newest record
// behind, so a channel handed over many times does not grow by a fence's
// worth each time; the newest term still fences the older ones.
func TestFenceRecordsDoNotPileUp(t *testing.T) {
	url := natstest.Start(t)
	o := buildOpener(t, jetstream.Config{URL: url})
	ctx := ctxFor(t)
	const ch, terms = "recovery/handed-over", 4
	for term := uint64(1); term <= terms; term++ {
		w := openWAL(t, o, ch, term)
		if _, err := w.Append(ctx, message.MutableMessage{Payload: []byte(fmt.Sprint(term))}); err != nil {
			t.Fatalf("term %d: %v", term, err)
		}
		w.Close()
	}
	_, js := rawConn(t, url)
	streams := streamNames(t, ctx, js)
	if len(streams) != 1 {
		t.Fatalf("streams %v, want one", streams)
	}
	st, err := js.Stream(ctx, streams[0])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.CachedInfo().State.Msgs, uint64(terms+1); got != want {
		t.Fatalf("stream %s holds %d messages after %d handovers, want %d (one per append and the newest fence record)", streams[0], got, terms, want)
	}
	old := openWAL(t, o, ch, terms-1)
	if _, err := old.Append(ctx, message.MutableMessage{Payload: []byte("stale")}); !errors.Is(err, walimpls.ErrFenced) {
		t.Fatalf("append of term %d after term %d: %v, want ErrFenced", terms-1, terms, err)
	}
}
