package jetstream_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/internal/benchround"
	"github.com/consumerd/consumerd/internal/embednats"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// Benchmarks compare the WAL adaptor over this backend with raw nats.go
// JetStream on the same embedded server, in the same run: each of
// benchRounds rounds measures both sides (which goes first flips every
// round) and their ratio, and the line reports the medians over the rounds
// (see internal/benchround), so a noisy, shared machine penalises neither
// side. Each benchmark does its whole measurement once per invocation,
// whatever b.N is.
const (
	benchMsgs    = 100000
	benchPayload = 100
	benchRounds  = 5
)

func benchPayloadBytes() []byte {
	p := make([]byte, benchPayload)
	for i := range p {
		p[i] = byte('a' + i%26)
	}
	return p
}

// rawStream creates a fresh stream configured like the backend's streams
// (one replica).
func rawStream(b *testing.B, js njs.JetStream, name string) { rawStreamR(b, js, name, 1) }

// rawStreamR creates a fresh stream of replicas replicas configured like the
// backend's streams (a replicated one reads through its leader).
func rawStreamR(b *testing.B, js njs.JetStream, name string, replicas int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, njs.StreamConfig{
		Name: name, Subjects: []string{name + ".data"}, Storage: njs.FileStorage,
		Replicas: replicas, Duplicates: 2 * time.Minute, AllowDirect: replicas == 1,
	}); err != nil {
		b.Fatalf("create raw stream %s: %v", name, err)
	}
}

func rawConn(tb testing.TB, url string) (*nats.Conn, njs.JetStream) {
	tb.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := njs.New(nc, njs.WithPublishAsyncMaxPending(4000))
	if err != nil {
		tb.Fatal(err)
	}
	return nc, js
}

// rawAppend publishes n messages with PublishAsync to a fresh stream and
// waits for every acknowledgement; it returns messages per second.
func rawAppend(b *testing.B, js njs.JetStream, stream string, n int) float64 {
	return rawAppendR(b, js, stream, n, 1)
}

// rawAppendR is rawAppend on a stream of replicas replicas.
func rawAppendR(b *testing.B, js njs.JetStream, stream string, n, replicas int) float64 {
	b.Helper()
	rawStreamR(b, js, stream, replicas)
	payload := benchPayloadBytes()
	subj := stream + ".data"
	start := time.Now()
	for i := 0; i < n; i++ {
		for {
			_, err := js.PublishAsync(subj, payload)
			if err == nil {
				break
			}
			if err != njs.ErrTooManyStalledMsgs {
				b.Fatalf("raw PublishAsync: %v", err)
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(60 * time.Second):
		b.Fatal("raw appends not acknowledged in 60s")
	}
	return float64(n) / time.Since(start).Seconds()
}

// walAppend appends n messages with AppendAsync through the adaptor on a fresh
// channel and waits for every callback; it returns messages per second.
func walAppend(b *testing.B, o wal.Opener, channel string, term uint64, n int) float64 {
	b.Helper()
	ctx := context.Background()
	w, err := o.Open(ctx, &walimpls.OpenOption{Channel: channel, Term: term})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	payload := benchPayloadBytes()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	wg.Add(n)
	start := time.Now()
	for i := 0; i < n; i++ {
		w.AppendAsync(ctx, message.MutableMessage{Payload: payload}, func(_ *wal.AppendResult, err error) {
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	el := time.Since(start)
	if firstErr != nil {
		b.Fatalf("wal AppendAsync: %v", firstErr)
	}
	return float64(n) / el.Seconds()
}

func walOpener(b *testing.B, url string) wal.Opener { return walOpenerR(b, url, 1) }

// walOpenerR is an adaptor over the backend creating streams of replicas
// replicas.
func walOpenerR(b *testing.B, url string, replicas int) wal.Opener {
	b.Helper()
	o, err := wal.NewOpenerBuilder(jetstream.NewBuilder(jetstream.Config{URL: url, Replicas: replicas})).Build()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(o.Close)
	return o
}

// runRounds runs benchRounds rounds of raw(r) and adaptor(r), alternating
// which goes first, and prints name's BENCH line: the medians of rate (the
// adaptor's), raw_rate and the per-round ratio, with the ratio's min and max.
func runRounds(b *testing.B, name string, n int, raw, adaptor func(r int) float64) {
	benchround.Run(b, benchround.Spec{
		Name:     name,
		Params:   fmt.Sprintf("backend=jetstream msgs=%d", n),
		Rounds:   benchRounds,
		Headline: []string{"ratio"},
	}, func(r int) []benchround.Figure {
		var rate, rawRate float64
		if r%2 == 0 {
			rawRate = raw(r)
			rate = adaptor(r)
		} else {
			rate = adaptor(r)
			rawRate = raw(r)
		}
		return []benchround.Figure{
			benchround.F("rate", rate, 0), benchround.F("raw_rate", rawRate, 0),
			benchround.F("ratio", rate/rawRate, 2),
		}
	})
}

func BenchmarkAppend(b *testing.B) {
	url := natstest.Start(b)
	_, js := rawConn(b, url)
	o := walOpener(b, url)
	runRounds(b, "wal.append", benchMsgs,
		func(r int) float64 { return rawAppend(b, js, fmt.Sprintf("rawappend%d", r), benchMsgs) },
		func(r int) float64 { return walAppend(b, o, fmt.Sprintf("bench/append-%d", r), 0, benchMsgs) })
}

// Message counts of the benchmarks on other set-ups, each about 2 s or more
// a side on a 2-core machine: a 3-node cluster, and an fsync per append
// batch (far slower, hence far fewer messages).
const (
	benchR3Msgs   = 200000
	benchSyncMsgs = 10000
)

// BenchmarkAppendR3 is wal.append on a 3-node JetStream cluster with R=3
// streams (every append replicated to a quorum before it is acknowledged).
func BenchmarkAppendR3(b *testing.B) {
	url := natstest.StartCluster(b, 3)
	_, js := rawConn(b, url)
	o := walOpenerR(b, url, 3)
	runRounds(b, "wal.append.r3", benchR3Msgs,
		func(r int) float64 { return rawAppendR(b, js, fmt.Sprintf("rawappendr3%d", r), benchR3Msgs, 3) },
		func(r int) float64 { return walAppend(b, o, fmt.Sprintf("bench/append-r3-%d", r), 0, benchR3Msgs) })
}

// BenchmarkAppendSyncAlways is wal.append on a server with sync_interval:
// always (an fsync before each acknowledgement batch).
func BenchmarkAppendSyncAlways(b *testing.B) {
	url := natstest.StartServer(b, embednats.Config{SyncAlways: true}).URL()
	_, js := rawConn(b, url)
	o := walOpener(b, url)
	runRounds(b, "wal.append.sync_always", benchSyncMsgs,
		func(r int) float64 { return rawAppend(b, js, fmt.Sprintf("rawappendsync%d", r), benchSyncMsgs) },
		func(r int) float64 { return walAppend(b, o, fmt.Sprintf("bench/append-sync-%d", r), 0, benchSyncMsgs) })
}

// rawChainedAppend publishes n messages the way a fenced writer does on a
// server with atomic batches, with plain nats.go: each carries a unique
// Nats-Msg-Id and is conditional on the stream's last sequence being its
// predecessor's (the stream starts empty), all pipelined with PublishAsync;
// it returns messages per second.
func rawChainedAppend(b *testing.B, js njs.JetStream, stream string, n int) float64 {
	b.Helper()
	rawStream(b, js, stream)
	payload := benchPayloadBytes()
	subj := stream + ".data"
	start := time.Now()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%s-%d", stream, i)
		opts := []njs.PublishOpt{njs.WithMsgID(id), njs.WithExpectLastSequence(uint64(i))}
		for {
			_, err := js.PublishAsync(subj, payload, opts...)
			if err == nil {
				break
			}
			if err != njs.ErrTooManyStalledMsgs {
				b.Fatalf("raw chained PublishAsync: %v", err)
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(60 * time.Second):
		b.Fatal("raw chained appends not acknowledged in 60s")
	}
	el := time.Since(start)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		b.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != uint64(n) {
		b.Fatalf("raw chained appends stored %v messages (%v), want %d", info.State.Msgs, err, n)
	}
	return float64(n) / el.Seconds()
}

// BenchmarkAppendFenced is the recovery-log path: a writer with a term, so
// every append is conditional (chained on the stream's last sequence) yet
// pipelined. Its baseline is the same chained protocol in raw nats.go, so the
// ratio is the adaptor's and backend's overhead; the chain's own cost against
// unconditional appends shows by comparing raw_rate with wal.append's.
func BenchmarkAppendFenced(b *testing.B) {
	url := natstest.Start(b)
	_, js := rawConn(b, url)
	o := walOpener(b, url)
	runRounds(b, "wal.append.fenced", benchMsgs,
		func(r int) float64 { return rawChainedAppend(b, js, fmt.Sprintf("rawfenced%d", r), benchMsgs) },
		func(r int) float64 { return walAppend(b, o, fmt.Sprintf("recovery/bench-%d", r), 1, benchMsgs) })
}

// rawScan reads n messages of subject from stream with an ordered consumer,
// taking each message's stream sequence (any consumer that tracks its offset
// needs it); it returns messages per second.
func rawScan(b *testing.B, js njs.JetStream, stream, subject string, n int) float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	cons, err := js.OrderedConsumer(ctx, stream, njs.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		b.Fatal(err)
	}
	it, err := cons.Messages(njs.PullMaxMessages(1024))
	if err != nil {
		b.Fatal(err)
	}
	defer it.Stop()
	var last uint64
	for i := 0; i < n; i++ {
		m, err := it.Next()
		if err != nil {
			b.Fatalf("raw scan after %d: %v", i, err)
		}
		md, err := m.Metadata()
		if err != nil {
			b.Fatal(err)
		}
		if md.Sequence.Stream <= last {
			b.Fatalf("raw scan: sequence %d after %d", md.Sequence.Stream, last)
		}
		last = md.Sequence.Stream
	}
	return float64(n) / time.Since(start).Seconds()
}

// walScan reads n messages from channel with a wal.Scanner.
func walScan(b *testing.B, w wal.WAL, n int) float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	s, err := w.Read(ctx, wal.ReadOption{Name: "bench", DeliverPolicy: wal.DeliverAll()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var last message.MessageID
	for i := 0; i < n; i++ {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				b.Fatalf("wal scan stopped after %d: %v", i, s.Error())
			}
			if m.ID <= last {
				b.Fatalf("wal scan: id %d after %d", m.ID, last)
			}
			last = m.ID
		case <-ctx.Done():
			b.Fatalf("wal scan: %d of %d in 60s", i, n)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

func BenchmarkScan(b *testing.B) {
	url := natstest.Start(b)
	_, js := rawConn(b, url)
	o := walOpener(b, url)
	const channel = "bench/scan"
	walAppend(b, o, channel, 0, benchMsgs) // fill the channel once; both sides read it
	w, err := o.Open(context.Background(), &walimpls.OpenOption{Channel: channel})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	tok, err := jetstream.EscapeChannel(channel)
	if err != nil {
		b.Fatal(err)
	}
	stream, subject := "consumerd_"+tok, "consumerd."+tok+".data"
	runRounds(b, "wal.scan", benchMsgs,
		func(int) float64 { return rawScan(b, js, stream, subject, benchMsgs) },
		func(int) float64 { return walScan(b, w, benchMsgs) })
}
