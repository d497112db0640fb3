package embednats_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/internal/benchround"
	"github.com/consumerd/consumerd/internal/embednats"
)

// appendRate publishes n 100-byte messages with PublishAsync to a fresh file
// stream on a fresh server and returns acknowledged messages per second.
func appendRate(b *testing.B, syncAlways bool, n int) float64 {
	b.Helper()
	s, err := embednats.Start(embednats.Config{StoreDir: b.TempDir(), SyncAlways: syncAlways})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown()
	nc, err := nats.Connect(s.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}}); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 100)
	start := time.Now()
	for i := 0; i < n; i++ {
		for {
			_, err := js.PublishAsync("s", payload)
			if err == nil {
				break
			}
			if err != jetstream.ErrTooManyStalledMsgs {
				b.Fatal(err)
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatal("appends not acknowledged in 30s")
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkSyncAlways measures what Config.SyncAlways costs: pipelined
// 100-byte appends with an fsync per store write, against the default
// periodic fsync. Each round measures both (on fresh servers, the default
// first) and their ratio; the BENCH line has the medians over the rounds.
func BenchmarkSyncAlways(b *testing.B) {
	const n = 10000
	benchround.Run(b, benchround.Spec{
		Name:     "nats.append.sync_always",
		Params:   fmt.Sprintf("msgs=%d", n),
		Rounds:   5,
		Headline: []string{"ratio"},
	}, func(int) []benchround.Figure {
		rawRate := appendRate(b, false, n)
		rate := appendRate(b, true, n)
		return []benchround.Figure{
			benchround.F("rate", rate, 0), benchround.F("raw_rate", rawRate, 0),
			benchround.F("ratio", rate/rawRate, 2),
		}
	})
}
