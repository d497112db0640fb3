package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/internal/embednats"
	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/internal/natsproc"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
	"github.com/consumerd/consumerd/wal/walimpls/walimplstest"
)

func TestMain(m *testing.M) { natsproc.Main(m) }

var prefixSeq atomic.Int64

// freshPrefix gives each builder its own channel namespace on a shared server.
func freshPrefix() string { return fmt.Sprintf("t%d", prefixSeq.Add(1)) }

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestConformance(t *testing.T) {
	url := natstest.Start(t)
	walimplstest.Run(t, func(t *testing.T) walimpls.OpenerBuilderImpls {
		return jetstream.NewBuilder(jetstream.Config{URL: url, Namespace: freshPrefix()})
	})
}

// The same suite on a 3-node JetStream cluster with R=3 streams (the
// production layout): conditional, pipelined appends and fencing go through
// the clustered proposal path.
func TestConformanceReplicated(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster")
	}
	url := natstest.StartCluster(t, 3)
	walimplstest.Run(t, func(t *testing.T) walimpls.OpenerBuilderImpls {
		return jetstream.NewBuilder(jetstream.Config{URL: url, Namespace: freshPrefix(), Replicas: 3})
	})
}

func buildOpener(t *testing.T, cfg jetstream.Config) walimpls.OpenerImpls {
	t.Helper()
	o, err := jetstream.NewBuilder(cfg).Build()
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	t.Cleanup(o.Close)
	return o
}

func openWAL(t *testing.T, o walimpls.OpenerImpls, ch string, term uint64) walimpls.WALImpls {
	t.Helper()
	w, err := o.Open(ctxFor(t), &walimpls.OpenOption{Channel: ch, Term: term})
	if err != nil {
		t.Fatalf("Open %q term %d: %v", ch, term, err)
	}
	t.Cleanup(w.Close)
	return w
}

func readAll(t *testing.T, w walimpls.WALImpls, n int) []message.ImmutableMessage {
	t.Helper()
	s, err := w.Read(ctxFor(t), walimpls.ReadOption{Name: "test", DeliverPolicy: walimpls.DeliverAll()})
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	defer s.Close()
	var out []message.ImmutableMessage
	timeout := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				t.Fatalf("scanner stopped after %d of %d: %v", len(out), n, s.Error())
			}
			out = append(out, m)
		case <-timeout:
			t.Fatalf("read %d of %d messages before timeout", len(out), n)
		}
	}
	return out
}

func TestBuildErrorNamesURL(t *testing.T) {
	// A port nothing listens on: take a free one and keep it closed.
	url := "nats://127.0.0.1:1"
	_, err := jetstream.NewBuilder(jetstream.Config{URL: url, ConnectTimeout: time.Second}).Build()
	if err == nil || !strings.Contains(err.Error(), url) {
		t.Fatalf("Build error %v does not name %s", err, url)
	}
	for _, tc := range []struct {
		cfg  jetstream.Config
		want string
	}{
		{jetstream.Config{}, "URL is required"},
		{jetstream.Config{URL: url, Namespace: "a.b"}, `Config.Namespace: namespace "a.b": illegal byte '.'`},
		{jetstream.Config{URL: url, Namespace: "a_b"}, `Config.Namespace: namespace "a_b": illegal byte '_'`},
		{jetstream.Config{URL: url, Namespace: "OBJ"}, `Config.Namespace: namespace "OBJ": reserved`},
		{jetstream.Config{URL: url, Replicas: 7}, "Replicas 7"},
	} {
		if _, err := jetstream.NewBuilder(tc.cfg).Build(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Build(%+v): error %v, want one mentioning %q", tc.cfg, err, tc.want)
		}
	}
}

func TestNameAndBadChannel(t *testing.T) {
	b := jetstream.NewBuilder(jetstream.Config{URL: natstest.Start(t)})
	if b.Name() != "jetstream" {
		t.Fatalf("Name %q", b.Name())
	}
	o, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, err := o.Open(ctxFor(t), &walimpls.OpenOption{Channel: ""}); err == nil {
		t.Fatal("Open of an empty channel name succeeded")
	}
	if _, err := o.Open(ctxFor(t), nil); err == nil {
		t.Fatal("Open(nil) succeeded")
	}
}

// Channels whose names differ only in characters the escaping rewrites live
// in distinct streams on a real server.
func TestSimilarChannelsAreSeparate(t *testing.T) {
	o := buildOpener(t, jetstream.Config{URL: natstest.Start(t)})
	chans := []string{"a/b", "a.b", "a_b", "a_sb", "a-b", "a__b"}
	for i, ch := range chans {
		w := openWAL(t, o, ch, 0)
		for j := 0; j <= i; j++ {
			if _, err := w.Append(ctxFor(t), message.MutableMessage{Payload: []byte(ch)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, ch := range chans {
		w := openWAL(t, o, ch, 0)
		got := readAll(t, w, i+1)
		for _, m := range got {
			if string(m.Payload) != ch || m.Channel != ch {
				t.Fatalf("channel %q holds %q (channel field %q)", ch, m.Payload, m.Channel)
			}
		}
		last, err := w.LastID(ctxFor(t))
		if err != nil || last != got[len(got)-1].ID {
			t.Fatalf("channel %q LastID %d, %v; want %d", ch, last, err, got[len(got)-1].ID)
		}
	}
}

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

// Many term-0 appenders on separate connections share a channel.
func TestTermZeroConcurrentConnections(t *testing.T) {
	url := natstest.Start(t)
	const ch = "words/0000"
	const writers, each = 4, 250
	var wg sync.WaitGroup
	ids := make(chan message.MessageID, writers*each)
	for i := 0; i < writers; i++ {
		w := openWAL(t, buildOpener(t, jetstream.Config{URL: url}), ch, 0)
		aa := w.(walimpls.AsyncAppender)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var inner sync.WaitGroup
			for j := 0; j < each; j++ {
				inner.Add(1)
				aa.AppendAsync(context.Background(), message.MutableMessage{Payload: []byte(fmt.Sprintf("%d-%d", i, j))},
					func(id message.MessageID, err error) {
						defer inner.Done()
						if err != nil {
							t.Errorf("writer %d append %d: %v", i, j, err)
							return
						}
						ids <- id
					})
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[message.MessageID]bool{}
	for id := range ids {
		if seen[id] {
			t.Fatalf("id %d acknowledged twice", id)
		}
		seen[id] = true
	}
	r := openWAL(t, buildOpener(t, jetstream.Config{URL: url}), ch, 0)
	got := readAll(t, r, writers*each)
	next := map[string]int{}
	for _, m := range got {
		if !seen[m.ID] {
			t.Fatalf("read id %d that was never acknowledged", m.ID)
		}
		var w, j int
		if _, err := fmt.Sscanf(string(m.Payload), "%d-%d", &w, &j); err != nil {
			t.Fatal(err)
		}
		if key := fmt.Sprint(w); next[key] != j {
			t.Fatalf("writer %d: message %d read before %d", w, j, next[key])
		} else {
			next[key] = j + 1
		}
	}
}

func TestDedupeID(t *testing.T) {
	o := buildOpener(t, jetstream.Config{URL: natstest.Start(t)})
	ctx := ctxFor(t)
	for _, term := range []uint64{0, 7} {
		w := openWAL(t, o, fmt.Sprintf("dedupe/%d", term), term)
		m := message.MutableMessage{Payload: []byte("once"), DedupeID: "txn-1"}
		a, err := w.Append(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		b, err := w.Append(ctx, m)
		if err != nil || a != b {
			t.Fatalf("term %d: repeated DedupeID got id %d, %v; want %d", term, b, err, a)
		}
		// The writer carries on after the duplicate (a fenced writer's expected
		// sequence did not move).
		c, err := w.Append(ctx, message.MutableMessage{Payload: []byte("next")})
		if err != nil || c <= a {
			t.Fatalf("term %d: append after duplicate: id %d, %v", term, c, err)
		}
		got := readAll(t, w, 2)
		if string(got[0].Payload) != "once" || string(got[1].Payload) != "next" {
			t.Fatalf("term %d: read %q, %q", term, got[0].Payload, got[1].Payload)
		}
	}
}

func TestMaxPayloadNamesSizes(t *testing.T) {
	srv := natstest.StartServer(t, embednats.Config{MaxPayload: 64 * 1024})
	o := buildOpener(t, jetstream.Config{URL: srv.URL()})
	w := openWAL(t, o, "big/0000", 0)
	_, err := w.Append(ctxFor(t), message.MutableMessage{Payload: make([]byte, 100*1024)})
	if err == nil {
		t.Fatal("append above max_payload succeeded")
	}
	if walimpls.IsRetryable(err) {
		t.Fatalf("oversize error %v is retryable", err)
	}
	for _, want := range []string{"102400", "65536", "max_payload", "big/0000"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not mention %q", err, want)
		}
	}
	// Just under the limit works.
	if _, err := w.Append(ctxFor(t), message.MutableMessage{Payload: make([]byte, 60*1024)}); err != nil {
		t.Fatal(err)
	}
}

// Restarting the embedded server on the same store keeps the channel and ids
// keep increasing; a fenced writer's term survives too.
func TestServerRestartKeepsIDsAndTerms(t *testing.T) {
	dir := t.TempDir()
	port := freeport.Port(t) // the server comes back on the same address
	srv := natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})
	ctx := ctxFor(t)
	o := buildOpener(t, jetstream.Config{URL: srv.URL()})
	w := openWAL(t, o, "recovery/restart", 3)
	var last message.MessageID
	for i := 0; i < 5; i++ {
		id, err := w.Append(ctx, message.MutableMessage{Payload: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		last = id
	}
	if err := w.Truncate(ctx, last); err != nil {
		t.Fatal(err)
	}
	w.Close()
	o.Close()
	srv.Shutdown()

	srv2 := natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})
	o2 := buildOpener(t, jetstream.Config{URL: srv2.URL()})
	stale := openWAL(t, o2, "recovery/restart", 2)
	if _, err := stale.Append(ctx, message.MutableMessage{Payload: []byte("stale")}); !errors.Is(err, walimpls.ErrFenced) {
		t.Fatalf("term 2 after restart: %v, want ErrFenced (term 3 was recorded)", err)
	}
	w2 := openWAL(t, o2, "recovery/restart", 4)
	id, err := w2.Append(ctx, message.MutableMessage{Payload: []byte("after")})
	if err != nil || id <= last {
		t.Fatalf("append after restart: id %d, %v; want above %d", id, err, last)
	}
	got := readAll(t, w2, 2)
	if got[0].ID != last || got[1].ID != id {
		t.Fatalf("after restart read ids %d,%d; want %d,%d (truncation kept)", got[0].ID, got[1].ID, last, id)
	}
	if _, err := w2.Read(ctx, walimpls.ReadOption{DeliverPolicy: walimpls.DeliverStartFrom(last - 1)}); !errors.Is(err, walimpls.ErrTruncated) {
		t.Fatalf("read below the truncation point after restart: %v, want ErrTruncated", err)
	}
}

// A scanner far behind when Truncate removes positions it has not read stops
// with ErrTruncated instead of skipping them.
func TestTruncateUnderLaggingScanner(t *testing.T) {
	o := buildOpener(t, jetstream.Config{URL: natstest.Start(t)})
	ctx := ctxFor(t)
	w := openWAL(t, o, "recovery/lag", 0)
	var ids []message.MessageID
	for i := 0; i < 50; i++ {
		id, err := w.Append(ctx, message.MutableMessage{Payload: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	s, err := w.Read(ctx, walimpls.ReadOption{DeliverPolicy: walimpls.DeliverAll(), ReadAheadBufferSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if m := <-s.Chan(); m.ID != ids[0] {
		t.Fatalf("first id %d, want %d", m.ID, ids[0])
	}
	if err := w.Truncate(ctx, ids[40]); err != nil {
		t.Fatal(err)
	}
	// Drain: the scanner may deliver what it had buffered, but must not
	// deliver anything at or above ids[40] without first stopping with
	// ErrTruncated — unless every id below ids[40] was delivered.
	prev := ids[0]
	for m := range s.Chan() {
		if m.ID != prev+1 {
			t.Fatalf("scanner skipped from %d to %d", prev, m.ID)
		}
		prev = m.ID
		if prev == ids[len(ids)-1] {
			t.Fatal("scanner delivered all messages although the middle was truncated unread")
		}
	}
	<-s.Done()
	if err := s.Error(); !errors.Is(err, walimpls.ErrTruncated) {
		t.Fatalf("scanner stopped with %v, want ErrTruncated", err)
	}
}

// A scanner and a writer on one connection ride through a restart of the
// server on the same port and store: the client reconnects, the ordered
// consumer resumes after the last delivered id, and appends continue above
// the old ids.
func TestScannerAndWriterSurviveServerRestart(t *testing.T) {
	dir := t.TempDir()
	port := freeport.Port(t) // the server comes back on the same address
	srv := natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})
	ctx := ctxFor(t)
	o := buildOpener(t, jetstream.Config{URL: srv.URL()})
	w := openWAL(t, o, "words/0001", 0)
	first, err := w.Append(ctx, message.MutableMessage{Payload: []byte("before")})
	if err != nil {
		t.Fatal(err)
	}
	s, err := w.Read(ctx, walimpls.ReadOption{DeliverPolicy: walimpls.DeliverAll()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if m := <-s.Chan(); m.ID != first {
		t.Fatalf("first id %d, want %d", m.ID, first)
	}
	srv.Shutdown()
	natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})

	// Appends fail while the client reconnects; retry until one lands (the
	// adaptor does this for callers). A DedupeID makes the retries idempotent:
	// an attempt that timed out may still be stored once the client
	// reconnects.
	var next message.MessageID
	waitfor.Until(t, 15*time.Second, "an append to succeed after the restart", func() (bool, string) {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		id, err := w.Append(actx, message.MutableMessage{Payload: []byte("after"), DedupeID: "after-1"})
		if err != nil {
			return false, err.Error()
		}
		next = id
		return true, ""
	})
	if next <= first {
		t.Fatalf("id after restart %d not above %d", next, first)
	}
	select {
	case m, ok := <-s.Chan():
		if !ok {
			t.Fatalf("scanner stopped across the restart: %v", s.Error())
		}
		if m.ID != next || string(m.Payload) != "after" {
			t.Fatalf("after restart scanner got id %d %q, want id %d \"after\"", m.ID, m.Payload, next)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("scanner delivered nothing within 20s after the restart")
	}
}

// A channel whose messages were all truncated still never reuses ids after a
// server restart (the store keeps the last sequence), and reads below the
// truncation point still fail.
func TestFullyTruncatedChannelSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	srv := natstest.StartServer(t, embednats.Config{StoreDir: dir})
	ctx := ctxFor(t)
	o := buildOpener(t, jetstream.Config{URL: srv.URL()})
	w := openWAL(t, o, "words/0009", 0)
	var last message.MessageID
	for i := 0; i < 5; i++ {
		id, err := w.Append(ctx, message.MutableMessage{Payload: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		last = id
	}
	if err := w.Truncate(ctx, last+100); err != nil { // clamped to last+1: everything goes
		t.Fatal(err)
	}
	if got, err := w.LastID(ctx); err != nil || got != last {
		t.Fatalf("LastID after truncating everything: %d, %v; want %d (it never goes down)", got, err, last)
	}
	w.Close()
	o.Close()
	srv.Shutdown()

	srv2 := natstest.StartServer(t, embednats.Config{StoreDir: dir})
	w2 := openWAL(t, buildOpener(t, jetstream.Config{URL: srv2.URL()}), "words/0009", 0)
	id, err := w2.Append(ctx, message.MutableMessage{Payload: []byte("after")})
	if err != nil || id <= last {
		t.Fatalf("append after restart: id %d, %v; want above %d", id, err, last)
	}
	if _, err := w2.Read(ctx, walimpls.ReadOption{DeliverPolicy: walimpls.DeliverStartFrom(last)}); !errors.Is(err, walimpls.ErrTruncated) {
		t.Fatalf("read from truncated id %d: %v, want ErrTruncated", last, err)
	}
	if got := readAll(t, w2, 1); got[0].ID != id {
		t.Fatalf("DeliverAll after restart starts at %d, want %d", got[0].ID, id)
	}
}

// A fenced writer keeps its term across a server restart: once the client has
// reconnected its appends succeed again (its chain resynchronises), ids keep
// increasing, and a lower term is still fenced.
func TestFencedWriterRidesThroughServerRestart(t *testing.T) {
	dir := t.TempDir()
	port := freeport.Port(t) // the server comes back on the same address
	srv := natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})
	ctx := ctxFor(t)
	o := buildOpener(t, jetstream.Config{URL: srv.URL()})
	w := openWAL(t, o, "recovery/ride", 5)
	var last message.MessageID
	for i := 0; i < 3; i++ {
		id, err := w.Append(ctx, message.MutableMessage{Payload: []byte(fmt.Sprint("before-", i))})
		if err != nil {
			t.Fatal(err)
		}
		last = id
	}
	srv.Shutdown()
	natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})

	var next message.MessageID
	waitfor.Until(t, 15*time.Second, "an append to succeed after the restart", func() (bool, string) {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		id, err := w.Append(actx, message.MutableMessage{Payload: []byte("after"), DedupeID: "ride-after"})
		if errors.Is(err, walimpls.ErrFenced) {
			t.Fatalf("writer fenced by a restart: %v", err)
		}
		if err != nil {
			return false, err.Error()
		}
		next = id
		return true, ""
	})
	if next <= last {
		t.Fatalf("id after restart %d not above %d", next, last)
	}
	// The chain continues normally after the resync.
	more, err := w.Append(ctx, message.MutableMessage{Payload: []byte("more")})
	if err != nil || more <= next {
		t.Fatalf("append after resync: id %d, %v; want above %d", more, err, next)
	}
	stale := openWAL(t, o, "recovery/ride", 4)
	if _, err := stale.Append(ctx, message.MutableMessage{Payload: []byte("stale")}); !errors.Is(err, walimpls.ErrFenced) {
		t.Fatalf("term 4 after restart: %v, want ErrFenced", err)
	}
	got := readAll(t, w, 5)
	var payloads []string
	for _, m := range got {
		payloads = append(payloads, string(m.Payload))
	}
	if strings.Join(payloads, ",") != "before-0,before-1,before-2,after,more" {
		t.Fatalf("channel holds %v", payloads)
	}
}

// An acknowledgement that never comes must not stall the connection: the
// stream here stores appends without acknowledging them (StreamConfig.NoAck,
// which looks to the client like acks lost in a cluster leader change without
// a reconnect). The opener's watchdog fails them, retryably, between one and
// about 1.25 AckTimeout after they were sent, and the connection keeps
// working once acknowledgements flow again.
func TestLostAcksFailAfterAckTimeout(t *testing.T) {
	url := natstest.Start(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const ackTimeout = 400 * time.Millisecond
	prefix := freshPrefix()
	o := buildOpener(t, jetstream.Config{URL: url, Namespace: prefix, AckTimeout: ackTimeout})
	setNoAck := func(channel string, noAck bool) {
		t.Helper()
		tok, err := jetstream.EscapeChannel(channel)
		if err != nil {
			t.Fatal(err)
		}
		st, err := js.Stream(ctxFor(t), prefix+"_"+tok)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.NoAck = noAck
		if _, err := js.UpdateStream(ctxFor(t), cfg); err != nil {
			t.Fatalf("set NoAck=%v on %s: %v", noAck, cfg.Name, err)
		}
	}
	for _, term := range []uint64{0, 3} {
		channel := fmt.Sprintf("lost-acks/%d", term)
		w := openWAL(t, o, channel, term)
		first, err := w.Append(ctxFor(t), message.MutableMessage{Payload: []byte("acked")})
		if err != nil {
			t.Fatal(err)
		}
		setNoAck(channel, true)
		const n = 50
		ctx := ctxFor(t)
		aa := w.(walimpls.AsyncAppender)
		errs := make(chan error, n)
		start := time.Now()
		for i := 0; i < n; i++ {
			aa.AppendAsync(ctx, message.MutableMessage{Payload: []byte("lost")},
				func(_ message.MessageID, err error) { errs <- err })
		}
		// Meanwhile another goroutine keeps appending, so the watchdog's
		// CleanupPublisher races with publishes (this test runs under -race).
		var (
			stop, stopped = make(chan struct{}), make(chan struct{})
			extra         sync.WaitGroup
			extraMu       sync.Mutex
			extraStored   int // failed by the watchdog: sent, stored, unacknowledged
			extraBad      error
		)
		go func() {
			defer close(stopped)
			for {
				select {
				case <-stop:
					return
				default:
				}
				extra.Add(1)
				aa.AppendAsync(ctx, message.MutableMessage{Payload: []byte("lost too")}, func(_ message.MessageID, err error) {
					extraMu.Lock()
					switch {
					case err != nil && errors.Is(err, njs.ErrJetStreamPublisherClosed):
						extraStored++
					case term > 0 && err != nil && walimpls.IsRetryable(err) && strings.Contains(err.Error(), "outcomes are still in flight"):
						// A fenced writer sends nothing while the outcomes
						// of a failed chain are still coming in.
					default:
						extraBad = fmt.Errorf("concurrent append settled with %v, want an ack-timeout error", err)
					}
					extraMu.Unlock()
					extra.Done()
				})
				time.Sleep(2 * time.Millisecond) // pacing only
			}
		}()
		for i := 0; i < n; i++ {
			select {
			case err := <-errs:
				if err == nil {
					t.Fatalf("term %d: append %d acknowledged by a stream that sends no acks", term, i)
				}
				if !errors.Is(err, njs.ErrJetStreamPublisherClosed) || !walimpls.IsRetryable(err) || !strings.Contains(err.Error(), "ack timeout") {
					t.Fatalf("term %d: append %d failed with %v, want a retryable ack-timeout error", term, i, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("term %d: %d of %d unacknowledged appends still pending after 10s", term, n-i, n)
			}
		}
		// The watchdog fails appends older than AckTimeout, checking every
		// AckTimeout/4; the upper bound leaves room for a loaded -race run.
		if el := time.Since(start); el < ackTimeout || el > 10*ackTimeout {
			t.Fatalf("term %d: unacknowledged appends failed after %v, want between %v and %v", term, el, ackTimeout, 10*ackTimeout)
		}
		close(stop)
		<-stopped
		extraDone := make(chan struct{})
		go func() { extra.Wait(); close(extraDone) }()
		select {
		case <-extraDone:
		case <-time.After(10 * time.Second):
			t.Fatalf("term %d: concurrent appends still pending 10s after they stopped", term)
		}
		if extraBad != nil {
			t.Fatalf("term %d: %v", term, extraBad)
		}
		// Acknowledgements flow again: the same connection appends, after the
		// messages that were stored without an ack.
		setNoAck(channel, false)
		id, err := w.Append(ctx, message.MutableMessage{Payload: []byte("acked again")})
		if err != nil {
			t.Fatalf("term %d: append after acks resumed: %v", term, err)
		}
		if want := first + message.MessageID(n+extraStored) + 1; id != want {
			t.Fatalf("term %d: append after acks resumed got id %d, want %d (after %d+%d stored unacknowledged)", term, id, want, n, extraStored)
		}
	}
}

// Term-0 appends in flight per connection are bounded by MaxPending: with
// the stream sending no acks, the append after MaxPending blocks in
// AppendAsync until its context ends; once the watchdog has failed the
// unacknowledged ones, slots are free again.
func TestTermZeroBackpressure(t *testing.T) {
	url := natstest.Start(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const maxPending = 3
	prefix := freshPrefix()
	o := buildOpener(t, jetstream.Config{URL: url, Namespace: prefix, MaxPending: maxPending, AckTimeout: 500 * time.Millisecond})
	w := openWAL(t, o, "bp", 0)
	tok, err := jetstream.EscapeChannel("bp")
	if err != nil {
		t.Fatal(err)
	}
	setNoAck := func(noAck bool) {
		t.Helper()
		st, err := js.Stream(ctxFor(t), prefix+"_"+tok)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.NoAck = noAck
		if _, err := js.UpdateStream(ctxFor(t), cfg); err != nil {
			t.Fatalf("set NoAck=%v: %v", noAck, err)
		}
	}
	setNoAck(true)
	aa := w.(walimpls.AsyncAppender)
	errs := make(chan error, maxPending)
	for i := 0; i < maxPending; i++ {
		aa.AppendAsync(ctxFor(t), message.MutableMessage{Payload: []byte("unacked")}, func(_ message.MessageID, err error) { errs <- err })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	blocked := make(chan error, 1)
	aa.AppendAsync(ctx, message.MutableMessage{Payload: []byte("blocked")}, func(_ message.MessageID, err error) { blocked <- err })
	select {
	case err := <-blocked:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("append beyond MaxPending: %v, want it to block until its context deadline", err)
		}
	default:
		t.Fatal("append beyond MaxPending returned without settling")
	}
	for i := 0; i < maxPending; i++ {
		select {
		case err := <-errs:
			if !walimpls.IsRetryable(err) || !strings.Contains(err.Error(), "ack timeout") {
				t.Fatalf("unacknowledged append %d: %v, want a retryable ack-timeout error", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d unacknowledged appends still pending after 10s", maxPending-i)
		}
	}
	setNoAck(false)
	if _, err := w.Append(ctxFor(t), message.MutableMessage{Payload: []byte("acked")}); err != nil {
		t.Fatalf("append after the slots were freed: %v", err)
	}
}

// Two clusters' openers on one server, in different namespaces, share no
// stream: the same channel fenced with a higher term in one leaves the other's
// writer unfenced, each reads only its own messages, and the streams carry
// their namespace (the default one keeps consumerd's old names).
func TestNamespacesApart(t *testing.T) {
	url := natstest.Start(t)
	ctx := ctxFor(t)
	const ch = "recovery/wordcount-0000"
	alpha := openWAL(t, buildOpener(t, jetstream.Config{URL: url, Namespace: "alpha"}), ch, 5)
	if _, err := alpha.Append(ctx, message.MutableMessage{Payload: []byte("a1")}); err != nil {
		t.Fatal(err)
	}
	beta := openWAL(t, buildOpener(t, jetstream.Config{URL: url, Namespace: "beta"}), ch, 9)
	if _, err := beta.Append(ctx, message.MutableMessage{Payload: []byte("b1")}); err != nil {
		t.Fatal(err)
	}
	def := openWAL(t, buildOpener(t, jetstream.Config{URL: url}), "words/0003", 0)
	if _, err := def.Append(ctx, message.MutableMessage{Payload: []byte("d1")}); err != nil {
		t.Fatal(err)
	}
	// beta's higher term did not fence alpha's writer.
	if _, err := alpha.Append(ctx, message.MutableMessage{Payload: []byte("a2")}); err != nil {
		t.Fatalf("alpha's append after beta opened the same channel with a higher term: %v", err)
	}
	for _, tc := range []struct {
		w    walimpls.WALImpls
		want string
	}{{alpha, "a1,a2"}, {beta, "b1"}, {def, "d1"}} {
		var got []string
		for _, m := range readAll(t, tc.w, strings.Count(tc.want, ",")+1) {
			got = append(got, string(m.Payload))
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("%s read %v, want %s", tc.w.WALName(), got, tc.want)
		}
	}

	_, js := rawConn(t, url)
	streams := streamNames(t, ctx, js)
	if got, want := strings.Join(streams, " "), "alpha_recovery_swordcount-0000 beta_recovery_swordcount-0000 consumerd_words_s0003"; got != want {
		t.Fatalf("streams %s, want %s", got, want)
	}
	for _, s := range []struct{ stream, subject string }{
		{"alpha_recovery_swordcount-0000", "alpha.recovery_swordcount-0000.data"},
		{"consumerd_words_s0003", "consumerd.words_s0003.data"},
	} {
		st, err := js.Stream(ctx, s.stream)
		if err != nil {
			t.Fatal(err)
		}
		if subj := st.CachedInfo().Config.Subjects; !slices.Contains(subj, s.subject) {
			t.Errorf("stream %s captures %v, want %s among them", s.stream, subj, s.subject)
		}
	}
}

// TestRequestTimeoutIsRetryable: with the server gone, a request that gets
// no reply within RequestTimeout fails with a retryable error (the adaptor
// and the shard retry it; the caller's own deadline, in contrast, is final),
// also when the caller's deadline is far away: the chaos harness found a
// publish with a 30 s --timeout stuck in Open for all of it after the
// nats-server it asked was killed.
func TestRequestTimeoutIsRetryable(t *testing.T) {
	srv := natstest.StartServer(t, embednats.Config{})
	o := buildOpener(t, jetstream.Config{URL: srv.URL(), RequestTimeout: 300 * time.Millisecond})
	w := openWAL(t, o, "words/0001", 0)
	srv.Shutdown()
	for name, call := range map[string]func(context.Context) error{
		"LastID":     func(ctx context.Context) error { _, err := w.LastID(ctx); return err },
		"LastMarker": func(ctx context.Context) error { _, err := w.(walimpls.BatchAppender).LastMarker(ctx, "c"); return err },
		"Open": func(ctx context.Context) error {
			_, err := o.Open(ctx, &walimpls.OpenOption{Channel: "words/0002"})
			return err
		},
	} {
		err := call(context.Background())
		if err == nil || !walimpls.IsRetryable(err) || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no reply within the request timeout") {
			t.Errorf("%s without a server: %v (retryable %v), want a retryable no-reply error", name, err, walimpls.IsRetryable(err))
		}
		long, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := time.Now()
		err = call(long)
		cancel()
		if !walimpls.IsRetryable(err) || time.Since(start) > 30*time.Second {
			t.Errorf("%s within a 1-minute deadline: %v after %s, want a retryable no-reply error after the request timeout", name, err, time.Since(start))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err = call(ctx)
		cancel()
		if walimpls.IsRetryable(err) {
			t.Errorf("%s past the caller's deadline: %v is retryable, want final", name, err)
		}
	}
}

// A damaged message stops its scanner with a permanent error naming it, and
// nothing after it is delivered: a scanner that went on past it would let a
// shard commit an offset beyond a message it never consumed.
func TestDamagedMessageStopsScannerBeforeNext(t *testing.T) {
	url := natstest.Start(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	prefix := freshPrefix()
	o := buildOpener(t, jetstream.Config{URL: url, Namespace: prefix})
	const channel = "damaged/0000"
	w := openWAL(t, o, channel, 0)
	if _, err := w.Append(ctxFor(t), message.MutableMessage{Payload: []byte("good")}); err != nil {
		t.Fatal(err)
	}
	tok, err := jetstream.EscapeChannel(channel)
	if err != nil {
		t.Fatal(err)
	}
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	bad := &nats.Msg{Subject: prefix + "." + tok + ".data", Data: []byte("damaged"),
		Header: nats.Header{"Consumerd-Meta": []string{"k=%zz"}}}
	if _, err := js.PublishMsg(ctxFor(t), bad); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if _, err := w.Append(ctxFor(t), message.MutableMessage{Payload: []byte("after")}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := w.Read(ctxFor(t), walimpls.ReadOption{Name: "test", DeliverPolicy: walimpls.DeliverAll()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []string
	for m := range s.Chan() {
		got = append(got, string(m.Payload))
	}
	if len(got) != 1 || got[0] != "good" {
		t.Fatalf("scanner delivered %d messages (%q…), want only the one before the damaged one", len(got), got[:min(len(got), 3)])
	}
	if err := s.Error(); err == nil || walimpls.IsRetryable(err) || !strings.Contains(err.Error(), "k=%zz") {
		t.Fatalf("scanner stopped with %v, want a permanent error naming the bad header", err)
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

// TestBuildMarksJetStreamNotAnsweringYet: a server that is up but whose
// JetStream cannot answer (one node of a three-node cluster whose peers have
// not come: no meta leader) fails Build with ErrJetStreamUnavailable, which
// `serve` waits out; a server without JetStream fails without it.
func TestBuildMarksJetStreamNotAnsweringYet(t *testing.T) {
	start := func(args ...string) string {
		url, _ := natsproc.StartWith(t, args...)
		return url
	}
	lonely := start("-js", "-sd", t.TempDir(), "--name", "lonely", "--cluster_name", "c",
		"--cluster", fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t)),
		"--routes", fmt.Sprintf("nats://127.0.0.1:%d,nats://127.0.0.1:%d", freeport.Port(t), freeport.Port(t)))
	_, err := jetstream.NewBuilder(jetstream.Config{URL: lonely, ConnectTimeout: time.Second}).Build()
	if !errors.Is(err, jetstream.ErrJetStreamUnavailable) {
		t.Fatalf("Build on a cluster node without a meta leader: %v, want ErrJetStreamUnavailable", err)
	}
	plain := start()
	_, err = jetstream.NewBuilder(jetstream.Config{URL: plain, ConnectTimeout: time.Second}).Build()
	if err == nil || errors.Is(err, jetstream.ErrJetStreamUnavailable) {
		t.Fatalf("Build on a server without JetStream: %v, want an error that is not ErrJetStreamUnavailable", err)
	}
}

// streamNames lists the server's streams, sorted.
func streamNames(t *testing.T, ctx context.Context, js njs.JetStream) []string {
	t.Helper()
	var streams []string
	names := js.StreamNames(ctx)
	for n := range names.Name() {
		streams = append(streams, n)
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(streams)
	return streams
}
