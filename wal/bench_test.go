package wal_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// BenchmarkAppendAsyncJetStream compares wal.WAL.AppendAsync (adaptor over
// the JetStream backend, term 0) with raw nats.go PublishAsync into a stream
// on the same embedded server, same message size and count, in one run. It
// does its whole measurement once, whatever b.N, and prints one BENCH line:
// rates are messages acknowledged per second (median of alternating rounds),
// plus raw PublishAsync reading every ack in order, and the backend alone (no
// adaptor), which split the overhead between the adaptor and the backend.
func BenchmarkAppendAsyncJetStream(b *testing.B) {
	if b.N > 1 {
		b.Skip("measures once; run with -benchtime 1x")
	}
	const (
		msgs   = 30000
		size   = 128
		rounds = 8
	)
	url := natstest.Start(b)
	ctx := context.Background()
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}

	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	op := jetstreamOpener(b, url, freshJSPrefix())

	raw := func(round int) float64 {
		name := fmt.Sprintf("RAW%d", round)
		if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: name, Subjects: []string{"raw" + name + ".>"}}); err != nil {
			b.Fatal(err)
		}
		subj := "raw" + name + ".data"
		start := time.Now()
		for i := 0; i < msgs; i++ {
			for {
				_, err := js.PublishAsync(subj, payload)
				if err == nil {
					break
				}
				if err != natsjs.ErrTooManyStalledMsgs {
					b.Fatal(err)
				}
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
			b.Fatal("raw PublishAsync did not complete")
		}
		return msgs / time.Since(start).Seconds()
	}
	// rawAcks is raw PublishAsync plus reading every ack in order (what a
	// caller that needs each message's id does).
	rawAcks := func(round int) float64 {
		name := fmt.Sprintf("RAWACK%d", round)
		if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: name, Subjects: []string{"raw" + name + ".>"}}); err != nil {
			b.Fatal(err)
		}
		subj := "raw" + name + ".data"
		futs := make(chan natsjs.PubAckFuture, 4096)
		acked := make(chan error, 1)
		start := time.Now()
		go func() {
			var last uint64
			for f := range futs {
				select {
				case a := <-f.Ok():
					if a.Sequence <= last {
						acked <- fmt.Errorf("ack sequence %d after %d", a.Sequence, last)
						return
					}
					last = a.Sequence
				case err := <-f.Err():
					acked <- err
					return
				}
			}
			acked <- nil
		}()
		for i := 0; i < msgs; i++ {
			for {
				f, err := js.PublishAsync(subj, payload)
				if err == nil {
					futs <- f
					break
				}
				if err != natsjs.ErrTooManyStalledMsgs {
					b.Fatal(err)
				}
			}
		}
		close(futs)
		if err := <-acked; err != nil {
			b.Fatal(err)
		}
		return msgs / time.Since(start).Seconds()
	}
	adaptor := func(round int) float64 {
		w, err := op.Open(ctx, &wal.OpenOption{Channel: fmt.Sprintf("bench/%04d", round)})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		var wg sync.WaitGroup
		wg.Add(msgs)
		var mu sync.Mutex
		var firstErr error
		start := time.Now()
		for i := 0; i < msgs; i++ {
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
		elapsed := time.Since(start)
		if firstErr != nil {
			b.Fatal(firstErr)
		}
		return msgs / elapsed.Seconds()
	}

	// The backend alone (walimpls.AsyncAppender, no adaptor) splits the
	// overhead between the adaptor and the backend.
	bop, err := jetstream.NewBuilder(jetstream.Config{URL: url, Prefix: freshJSPrefix()}).Build()
	if err != nil {
		b.Fatal(err)
	}
	defer bop.Close()
	backend := func(round int) float64 {
		w, err := bop.Open(ctx, &walimpls.OpenOption{Channel: fmt.Sprintf("bench/%04d", round)})
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
		if failed.Load() > 0 {
			b.Fatalf("%d backend appends failed", failed.Load())
		}
		return msgs / elapsed.Seconds()
	}

	// Rounds rotate the order of the four runs so that load changes on a
	// shared machine hit each of them alike; medians are compared.
	var rawRates, rawAckRates, walRates, backendRates []float64
	runs := []func(round int){
		func(r int) { rawRates = append(rawRates, raw(r)) },
		func(r int) { walRates = append(walRates, adaptor(r)) },
		func(r int) { rawAckRates = append(rawAckRates, rawAcks(r)) },
		func(r int) { backendRates = append(backendRates, backend(r)) },
	}
	for r := 0; r < rounds; r++ {
		for k := range runs {
			runs[(k+r)%len(runs)](r)
		}
	}
	rawRate, rawAckRate := median(rawRates), median(rawAckRates)
	walRate, backendRate := median(walRates), median(backendRates)
	fmt.Printf("BENCH wal.append_async backend=jetstream msgs=%d size=%d rate_msg_s=%.0f raw_publish_async_msg_s=%.0f ratio=%.2f"+
		" raw_with_acks_msg_s=%.0f ratio_vs_raw_with_acks=%.2f backend_only_msg_s=%.0f adaptor_vs_backend=%.2f\n",
		msgs, size, walRate, rawRate, walRate/rawRate, rawAckRate, walRate/rawAckRate, backendRate, walRate/backendRate)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
