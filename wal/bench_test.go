package wal_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/benchround"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// BenchmarkAdaptorOverhead isolates the adaptor's share of the async append
// cost: wal.WAL.AppendAsync (adaptor over the JetStream backend, term 0)
// against the same backend's walimpls.AsyncAppender called directly, same
// server, message size and count, in one run. The canonical comparison with
// raw nats.go PublishAsync is wal.append in wal/walimpls/jetstream; this line
// says how much of the gap is the adaptor's. Each round measures both sides
// (which goes first flips every round) and their ratio; the line reports
// the medians over the rounds, so a noisy, shared machine penalises
// neither. It measures once, whatever b.N.
func BenchmarkAdaptorOverhead(b *testing.B) {
	const (
		msgs   = 100000
		size   = 100
		rounds = 5
	)
	url := natstest.Start(b)
	ctx := context.Background()
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	op := jetstreamOpener(b, url, freshJSPrefix())
	bop, err := jetstream.NewBuilder(jetstream.Config{URL: url, Namespace: freshJSPrefix()}).Build()
	if err != nil {
		b.Fatal(err)
	}
	defer bop.Close()

	adaptor := func(round int) float64 {
		w, err := op.Open(ctx, &wal.OpenOption{Channel: fmt.Sprintf("bench/adaptor-%d", round)})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		var wg sync.WaitGroup
		wg.Add(msgs)
		var failed atomic.Int64
		start := time.Now()
		for i := 0; i < msgs; i++ {
			w.AppendAsync(ctx, message.MutableMessage{Payload: payload}, func(_ *wal.AppendResult, err error) {
				if err != nil {
					failed.Add(1)
				}
				wg.Done()
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		if n := failed.Load(); n > 0 {
			b.Fatalf("%d adaptor appends failed", n)
		}
		return msgs / elapsed.Seconds()
	}
	backend := func(round int) float64 {
		w, err := bop.Open(ctx, &walimpls.OpenOption{Channel: fmt.Sprintf("bench/backend-%d", round)})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		aa, ok := w.(walimpls.AsyncAppender)
		if !ok {
			b.Fatal("the jetstream backend does not implement walimpls.AsyncAppender")
		}
		var wg sync.WaitGroup
		wg.Add(msgs)
		var failed atomic.Int64
		start := time.Now()
		for i := 0; i < msgs; i++ {
			aa.AppendAsync(ctx, message.MutableMessage{Payload: payload}, func(_ message.MessageID, err error) {
				if err != nil {
					failed.Add(1)
				}
				wg.Done()
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		if n := failed.Load(); n > 0 {
			b.Fatalf("%d backend appends failed", n)
		}
		return msgs / elapsed.Seconds()
	}

	benchround.Run(b, benchround.Spec{
		Name:     "wal.adaptor_overhead",
		Params:   fmt.Sprintf("backend=jetstream msgs=%d", msgs),
		Rounds:   rounds,
		Headline: []string{"ratio"},
	}, func(r int) []benchround.Figure {
		var rate, backendRate float64
		if r%2 == 0 {
			backendRate = backend(r)
			rate = adaptor(r)
		} else {
			rate = adaptor(r)
			backendRate = backend(r)
		}
		return []benchround.Figure{
			benchround.F("rate", rate, 0), benchround.F("backend_rate", backendRate, 0),
			benchround.F("ratio", rate/backendRate, 2),
		}
	})
}
