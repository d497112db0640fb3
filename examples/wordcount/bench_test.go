package wordcount_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/benchround"
	"github.com/consumerd/consumerd/internal/gctarget"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

const (
	benchShards = 2
	benchMsgs   = 200_000
)

// BenchmarkConsume measures messages/s through the whole exactly-once path
// (scanner → Consume → Flush → recovery-log commit on JetStream → RocksDB
// apply, plus the published counts) against a raw read of the same messages
// through the WAL scanner on the same embedded JetStream, and prints
//
//	BENCH shard.consume app=wordcount shards=S msgs=N rounds=K rate=R raw_rate=RAW ratio=X min=… max=…
//
// Each round is the whole run on a fresh server and cluster; the figures
// are the medians over the rounds (the ratio's of the per-round ratios).
// The work is done once, whatever b.N.
func BenchmarkConsume(b *testing.B) {
	if b.N > 1 {
		b.Skip("measured once at -benchtime 1x")
	}
	gctarget.Apply() // as a member does (serve)
	benchround.Run(b, benchround.Spec{
		Name:     "shard.consume",
		Params:   fmt.Sprintf("app=wordcount shards=%d msgs=%d", benchShards, benchMsgs),
		Rounds:   3,
		Headline: []string{"ratio"},
	}, func(int) []benchround.Figure {
		rate, rawRate := consumeRound(b)
		return []benchround.Figure{
			benchround.F("rate", rate, 0), benchround.F("raw_rate", rawRate, 0),
			benchround.F("ratio", rate/rawRate, 2),
		}
	})
}

// consumeRound is one round of BenchmarkConsume: it returns the shard
// path's and the raw read's messages per second.
func consumeRound(b *testing.B) (rate, rawRate float64) {
	url := natstest.Start(b)
	e := shardtest.NewCluster(b, jetstream.NewBuilder(jetstream.Config{URL: url}), wordcount.App())
	e.TxnMaxMessages = 0 // the service default
	var specs []*shard.Spec
	for i := 0; i < benchShards; i++ {
		s := shardtest.WordcountSpec(fmt.Sprintf("wordcount-%04d", i), i, 0)
		specs = append(specs, s)
		e.PutSpec(s)
	}

	// Pre-publish N lines of a few words, routed by key.
	lines := shardtest.Corpus(42, benchMsgs)
	e.PublishAll(topic.Description{Name: wordcount.InputTopic, Partitions: benchShards}, benchMsgs, func(i int) message.MutableMessage {
		return message.MutableMessage{Key: fmt.Sprintf("%s#%d", lines[i], i), Payload: []byte(lines[i])}
	})

	// Raw baseline: read every partition to its end through the WAL scanner,
	// once before and once after the measured run (their mean is the
	// baseline, so drift on a shared machine hits both sides alike).
	rawRead := func() time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		counts := make([]int, benchShards)
		for p := 0; p < benchShards; p++ {
			wg.Add(1)
			go func(p int) {
				defer wg.Done()
				counts[p] = readAll(b, e.Opener, topic.ChannelName(wordcount.InputTopic, p))
			}(p)
		}
		wg.Wait()
		d := time.Since(start)
		total := 0
		for _, n := range counts {
			total += n
		}
		if total != benchMsgs {
			b.Fatalf("raw read %d messages, want %d", total, benchMsgs)
		}
		return d
	}
	rawElapsed := rawRead()

	// The shard path: from assignment until every shard's committed offsets
	// reach the end of its partition.
	n := e.StartNode("bench", b.TempDir())
	last := map[string]message.MessageID{}
	for _, s := range specs {
		last[s.Sources[0].Channel()] = e.LastID(s.Sources[0].Channel())
	}
	start := time.Now()
	for _, s := range specs {
		e.Assign(n, s.ID, 0)
	}
	shardtest.Eventually(b, "every shard consumed its partition", func() (bool, string) {
		st := n.Service.Status()
		done := 0
		for _, ri := range st {
			if ri.State != allocator.StatePrimary {
				continue
			}
			ok := len(ri.Lag) > 0
			for ch, lag := range ri.Lag {
				ok = ok && lag == 0 && last[ch] > 0
			}
			if ok {
				done++
			}
		}
		return done == benchShards, fmt.Sprintf("%d of %d shards done: %+v", done, benchShards, st)
	})
	elapsed := time.Since(start)
	rawElapsed = (rawElapsed + rawRead()) / 2

	// Exactness check of the measured run.
	got := map[string]int64{}
	for _, s := range specs {
		for k, v := range e.Counts(n, s) {
			got[k] += v
		}
	}
	if d := shardtest.DiffCounts(got, wordcount.Count(lines)); d != "" {
		b.Fatalf("benchmark counts are wrong: %s", d)
	}
	n.Kill() // no idle node of this round runs during the next
	return float64(benchMsgs) / elapsed.Seconds(), float64(benchMsgs) / rawElapsed.Seconds()
}

// readAll reads channel from the start until its last id and returns the
// number of messages read.
func readAll(b *testing.B, op wal.Opener, channel string) int {
	ctx := context.Background()
	w, err := op.Open(ctx, &wal.OpenOption{Channel: channel})
	if err != nil {
		b.Error(err)
		return 0
	}
	defer w.Close()
	last, err := w.LastID(ctx)
	if err != nil {
		b.Error(err)
		return 0
	}
	sc, err := w.Read(ctx, wal.ReadOption{DeliverPolicy: wal.DeliverAll()})
	if err != nil {
		b.Error(err)
		return 0
	}
	defer sc.Close()
	n := 0
	for msg := range sc.Chan() {
		n++
		if msg.ID >= last {
			return n
		}
	}
	b.Errorf("%s: scanner ended early: %v", channel, sc.Error())
	return n
}
