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
	"github.com/consumerd/consumerd/internal/natsproc"
	"github.com/consumerd/consumerd/internal/natstest"
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
