package shard_test

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/consumerd/consumerd/examples/pipeline"
	"github.com/consumerd/consumerd/internal/benchround"
	"github.com/consumerd/consumerd/internal/gctarget"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// The density benchmark's workload: densityBenchLines unique tokens
// published to tally's input, at most densityBenchInFlight unacknowledged
// (as `consumerd publish` does), through a member holding densityBenchBase
// shards and then one holding CONSUMERD_BENCH_DENSITY_SHARDS (default
// densityBenchShards).
const (
	densityBenchLines     = 100_000
	densityBenchInFlight  = 4000
	densityBenchBase      = 4
	densityBenchShards    = 256
	densityBenchShardsEnv = "CONSUMERD_BENCH_DENSITY_SHARDS"
	densityBenchBudget    = 512 << 20
	// densityBenchWarmup lines per shard go through first, unmeasured.
	densityBenchWarmup = 20
)

// BenchmarkShardsDensity prints
//
//	BENCH shards.density shards=256 base_shards=4 lines=N rounds=K rate= base_rate= ratio= raw_rate= raw_base_rate= raw_ratio= min= max=
//
// The same work — N lines, each a token of its own, published to tally's
// input topic while the member consumes — on a member whose tally app has
// base_shards shards (the topics with as many partitions) and on one with
// shards shards. A rate is lines per second from the first publish until
// every line is consumed and every resulting count published to totals,
// exactly once. ratio is rate over base_rate, measured in the same round
// (each side on a fresh nats-server, etcd and member); 1 means the
// member's throughput does not depend on how many shards share it.
// raw_ratio is the same comparison for the engine alone (rawDensityRound:
// the lines copied partition to partition by WAL scanners and appends):
// what spreading the work over more streams costs the server itself.
// CONSUMERD_BENCH_DENSITY_CPUPROF=FILE profiles the dense side of the last
// round.
func BenchmarkShardsDensity(b *testing.B) {
	if b.N > 1 {
		b.Skip("measured once at -benchtime 1x")
	}
	gctarget.Apply() // as a member does (serve)
	n := densityBenchShards
	if s := os.Getenv(densityBenchShardsEnv); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			b.Fatalf("%s=%q is not a positive shard count", densityBenchShardsEnv, s)
		}
	}
	rounds := benchround.Rounds(b, 3)

	benchround.Run(b, benchround.Spec{
		Name:     "shards.density",
		Params:   fmt.Sprintf("shards=%d base_shards=%d lines=%d", n, densityBenchBase, densityBenchLines),
		Rounds:   3,
		Headline: []string{"ratio"},
	}, func(r int) []benchround.Figure {
		base := densityRound(b, densityBenchBase, "")
		prof := ""
		if r == rounds-1 {
			prof = os.Getenv("CONSUMERD_BENCH_DENSITY_CPUPROF")
		}
		rate := densityRound(b, n, prof)
		rawBase := rawDensityRound(b, densityBenchBase)
		raw := rawDensityRound(b, n)
		return []benchround.Figure{
			benchround.F("rate", rate, 0), benchround.F("base_rate", base, 0),
			benchround.F("ratio", rate/base, 2),
			benchround.F("raw_rate", raw, 0), benchround.F("raw_base_rate", rawBase, 0),
			benchround.F("raw_ratio", raw/rawBase, 2),
		}
	})
}

// densityRound runs the workload through a member with n tally shards and
// returns its lines per second.
func densityRound(b *testing.B, n int, cpuprof string) float64 {
	sc := benchround.NewScope(b)
	defer sc.Close()
	e := shardtest.NewCluster(sc, jetstream.NewBuilder(jetstream.Config{URL: natstest.Start(sc)}), pipeline.Tally())
	e.TxnMaxMessages = 0 // the service default
	e.LagInterval = shard.DefaultLagInterval
	e.ShareMemory(densityBenchBudget)
	tokens := topic.Description{Name: pipeline.Tokens, Partitions: n}
	e.PutTopic(tokens)
	e.PutTopic(topic.Description{Name: pipeline.Totals, Partitions: n})
	node := e.StartNode("n", sc.TempDir())
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("tally-%04d", i)
		e.PutSpec(&shard.Spec{ID: id, App: pipeline.TallyName, Sources: []shard.Source{{Topic: pipeline.Tokens, Partition: i}}})
		e.Assign(node, id, 0)
	}
	waitfor.Every(b, 50*time.Millisecond, 5*time.Minute, fmt.Sprintf("%d shards PRIMARY", n), func() (bool, string) {
		p := countPrimaries(b, e)
		return p == n, fmt.Sprintf("%d of %d PRIMARY", p, n)
	})
	// Warm up: every shard's first outputs open its output chain (and
	// create the output stream); the figure is the steady state's.
	warmC, warmP := sumCounter(b, "consumerd_shard_messages_consumed_total"), sumCounter(b, "consumerd_shard_outputs_published_total")
	densityPublish(b, e, tokens, "warm", densityBenchWarmup*n)
	densityDone(b, densityBenchWarmup*n, warmC, warmP)
	consumed0 := sumCounter(b, "consumerd_shard_messages_consumed_total")
	published0 := sumCounter(b, "consumerd_shard_outputs_published_total")

	if cpuprof != "" {
		f, err := os.Create(cpuprof)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	densityPublish(b, e, tokens, "tok", densityBenchLines)
	densityDone(b, densityBenchLines, consumed0, published0)
	elapsed := time.Since(start)
	// Exactly once: one count per token, no more.
	if p := sumCounter(b, "consumerd_shard_outputs_published_total") - published0; p != densityBenchLines {
		b.Errorf("%d shards: %.0f counts published for %d unique tokens; stored %d of %d", n, p, densityBenchLines,
			e.CountTopic(topic.Description{Name: pipeline.Totals, Partitions: n}), densityBenchLines+densityBenchWarmup*n)
	}
	return densityBenchLines / elapsed.Seconds()
}

// rawDensityRound is the engine's share of the workload, for n partitions:
// the same lines published the same way, each partition read by a WAL
// scanner whose every message is appended to the same partition of an
// output topic (at least once: no state, no transactions, no recovery log,
// no atomic batches). It returns lines per second from the first publish
// until every line's append is acknowledged.
func rawDensityRound(b *testing.B, n int) float64 {
	sc := benchround.NewScope(b)
	defer sc.Close()
	e := shardtest.NewCluster(sc, jetstream.NewBuilder(jetstream.Config{URL: natstest.Start(sc)}))
	in := topic.Description{Name: "raw-in", Partitions: n}
	ctx, cancel := context.WithCancel(context.Background())
	var acked atomic.Int64
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for p := 0; p < n; p++ {
		src, err := e.Opener.Open(ctx, &wal.OpenOption{Channel: topic.ChannelName(in.Name, p)})
		if err != nil {
			b.Fatal(err)
		}
		out, err := e.Opener.Open(ctx, &wal.OpenOption{Channel: topic.ChannelName("raw-out", p)})
		if err != nil {
			b.Fatal(err)
		}
		scn, err := src.Read(ctx, wal.ReadOption{DeliverPolicy: wal.DeliverAll()})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() { // stopped by cancel: its scanner's channel closes
			defer wg.Done()
			defer src.Close()
			defer out.Close()
			defer scn.Close()
			for msg := range scn.Chan() {
				out.AppendAsync(ctx, message.MutableMessage{Key: msg.Key, Payload: msg.Payload}, func(_ *wal.AppendResult, err error) {
					if err == nil {
						acked.Add(1)
					}
				})
			}
		}()
	}
	wait := func(want int64) {
		waitfor.Every(b, 100*time.Millisecond, 10*time.Minute, "every raw line copied", func() (bool, string) {
			a := acked.Load()
			return a >= want, fmt.Sprintf("%d of %d copied", a, want)
		})
	}
	densityPublish(b, e, in, "warm", densityBenchWarmup*n)
	wait(int64(densityBenchWarmup * n))
	start := time.Now()
	densityPublish(b, e, in, "tok", densityBenchLines)
	wait(int64(densityBenchWarmup*n + densityBenchLines))
	return densityBenchLines / time.Since(start).Seconds()
}

// densityDone waits until lines more lines than consumed0 were consumed
// and as many counts more than published0 published.
func densityDone(b *testing.B, lines int, consumed0, published0 float64) {
	waitfor.Every(b, 100*time.Millisecond, 10*time.Minute, "every line consumed and its count published", func() (bool, string) {
		c := sumCounter(b, "consumerd_shard_messages_consumed_total") - consumed0
		p := sumCounter(b, "consumerd_shard_outputs_published_total") - published0
		return c >= float64(lines) && p >= float64(lines), fmt.Sprintf("%.0f consumed, %.0f counts published of %d", c, p, lines)
	})
}

// densityPublish publishes lines tokens of their own (prefix-i) with at
// most densityBenchInFlight unacknowledged, as `consumerd publish` does.
func densityPublish(b *testing.B, e *shardtest.Cluster, d topic.Description, prefix string, lines int) {
	sem := make(chan struct{}, densityBenchInFlight)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var pubErr error
	for i := 0; i < lines; i++ {
		sem <- struct{}{}
		wg.Add(1)
		tok := fmt.Sprintf("%s-%07d", prefix, i)
		e.Pub.PublishAsync(context.Background(), d, message.MutableMessage{Key: tok, Payload: []byte(tok)}, func(_ topic.Partition, _ message.MessageID, err error) {
			if err != nil {
				mu.Lock()
				pubErr = err
				mu.Unlock()
			}
			<-sem
			wg.Done()
		})
	}
	wg.Wait()
	if pubErr != nil {
		b.Fatalf("publish to %s: %v", d.Name, pubErr)
	}
}

// sumCounter is the sum over every series of the process's counter name.
func sumCounter(tb testing.TB, name string) float64 {
	tb.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
