package pipeline_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/consumerd/consumerd/examples/pipeline"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/benchround"
	"github.com/consumerd/consumerd/internal/gctarget"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

const (
	benchParts = 2
	outputMsgs = 100_000
	pipeLines  = 50_000
)

// relay is a one-output-per-message app: each message of "in" is published
// to "out" with its key, exactly once (through the transaction) or at least
// once (straight to the topic, the way outputs went before the outbox).
type relay struct {
	atLeastOnce *topic.Publisher // nil: exactly once
	pending     []func() error   // at least once: the transaction's appends in flight
}

func (r *relay) Consume(s shard.Shard, env topic.Envelope, pub shard.Publisher) error {
	msg := message.MutableMessage{Key: env.Message.Key, Payload: env.Message.Payload}
	part := topic.Partition{Topic: "out", Index: env.Partition.Index}
	if r.atLeastOnce == nil {
		return pub.PublishTo(part, msg)
	}
	done := make(chan error, 1)
	r.atLeastOnce.PublishAsync(s.Context(), topic.Description{Name: "out", Partitions: benchParts}, msg,
		func(_ topic.Partition, _ message.MessageID, err error) { done <- err })
	r.pending = append(r.pending, func() error { return <-done })
	return nil
}

// Flush waits for the at-least-once appends: the transaction commits only
// once its outputs are acknowledged (a failover may publish them again).
func (r *relay) Flush(shard.Shard, shard.Publisher) error {
	for _, wait := range r.pending {
		if err := wait(); err != nil {
			return err
		}
	}
	r.pending = r.pending[:0]
	return nil
}

// prepublish appends n messages with distinct keys to topic d.
func prepublish(e *shardtest.Cluster, d topic.Description, n int, payload func(i int) string) {
	e.PublishAll(d, n, func(i int) message.MutableMessage {
		return message.MutableMessage{Key: fmt.Sprintf("k%d", i), Payload: []byte(payload(i))}
	})
}

// outputsRound runs the relay app on a fresh server until every output is
// stored, and returns messages per second.
func outputsRound(b *testing.B, atLeastOnce bool) float64 {
	url := natstest.Start(b)
	var pub *topic.Publisher // the cluster's, once it exists
	app := shard.App{Name: "relay", Topics: []string{"in"}, Outputs: []string{"out"},
		NewConsumer: func() shard.Consumer { return &relay{atLeastOnce: pub} }}
	e := shardtest.NewCluster(b, jetstream.NewBuilder(jetstream.Config{URL: url}), app)
	if atLeastOnce {
		pub = e.Pub
	}
	e.TxnMaxMessages = 0
	for _, name := range []string{"in", "out"} {
		e.PutTopic(topic.Description{Name: name, Partitions: benchParts})
	}
	prepublish(e, topic.Description{Name: "in", Partitions: benchParts}, outputMsgs, func(i int) string { return fmt.Sprintf("payload-%d", i) })
	n := e.StartNode("bench", b.TempDir())
	start := time.Now()
	for p := 0; p < benchParts; p++ {
		id := fmt.Sprintf("relay-%04d", p)
		e.PutSpec(&shard.Spec{ID: id, App: "relay", Sources: []shard.Source{{Topic: "in", Partition: p}}})
		e.Assign(n, id, 0)
	}
	out := topic.Description{Name: "out", Partitions: benchParts}
	shardtest.Eventually(b, "every output stored", func() (bool, string) {
		got := e.CountTopic(out)
		return got >= outputMsgs, fmt.Sprintf("%d of %d", got, outputMsgs)
	})
	el := time.Since(start)
	if got := e.CountTopic(out); got != outputMsgs {
		b.Fatalf("out holds %d messages, want %d", got, outputMsgs)
	}
	n.Kill()
	return outputMsgs / el.Seconds()
}

// BenchmarkOutputs: the relay app publishing one output per message exactly
// once (the outbox, atomic batches after commit) against the same app
// publishing at least once (straight to the topic, acknowledged before the
// commit), each round measuring both on fresh servers:
//
//	BENCH outputs.exactly_once msgs=N rounds=K rate=R at_least_once_rate=A ratio=X min=… max=…
func BenchmarkOutputs(b *testing.B) {
	if b.N > 1 {
		b.Skip("measured once at -benchtime 1x")
	}
	gctarget.Apply() // as a member does (serve)
	benchround.Run(b, benchround.Spec{
		Name: "outputs.exactly_once", Params: fmt.Sprintf("msgs=%d", outputMsgs), Rounds: 3, Headline: []string{"ratio"},
	}, func(r int) []benchround.Figure {
		var eo, alo float64
		if r%2 == 0 {
			eo, alo = outputsRound(b, false), outputsRound(b, true)
		} else {
			alo, eo = outputsRound(b, true), outputsRound(b, false)
		}
		return []benchround.Figure{benchround.F("rate", eo, 0), benchround.F("at_least_once_rate", alo, 0), benchround.F("ratio", eo/alo, 2)}
	})
}

// pipelineRound runs lines through split and tally (or through wordcount
// alone) on a fresh server and returns lines per second until the last
// stage counted every token.
func pipelineRound(b *testing.B, twoStage bool) float64 {
	lines := shardtest.Corpus(7, pipeLines)
	want := pipeline.Count(lines)
	var total int64
	for _, c := range want {
		total += c
	}
	in := wordcount.InputTopic
	apps := []shard.App{wordcount.App()}
	if twoStage {
		in = pipeline.Lines
		apps = []shard.App{pipeline.Split(), pipeline.Tally()}
	}
	e := shardtest.NewCluster(b, jetstream.NewBuilder(jetstream.Config{URL: natstest.Start(b)}), apps...)
	e.TxnMaxMessages = 0
	for _, a := range apps {
		for _, t := range append(append([]string{}, a.Topics...), a.Outputs...) {
			e.PutTopic(topic.Description{Name: t, Partitions: benchParts})
		}
	}
	prepublish(e, topic.Description{Name: in, Partitions: benchParts}, pipeLines, func(i int) string { return lines[i] })
	n := e.StartNode("bench", b.TempDir())
	start := time.Now()
	var last []*shard.Spec
	for _, a := range apps {
		for p := 0; p < benchParts; p++ {
			s := &shard.Spec{ID: fmt.Sprintf("%s-%04d", a.Name, p), App: a.Name, Sources: []shard.Source{{Topic: a.Topics[0], Partition: p}}}
			e.PutSpec(s)
			e.Assign(n, s.ID, 0)
			if a.Name != pipeline.SplitName {
				last = append(last, s)
			}
		}
	}
	shardtest.Eventually(b, "the last stage counted every token", func() (bool, string) {
		var sum int64
		for _, s := range last {
			sh, release, ok := n.Service.Primary(s.ID)
			if !ok {
				return false, s.ID + " not primary"
			}
			app := e.Apps[s.App]
			_ = app.Scan(sh, func(_, v string) error {
				var c int64
				fmt.Sscan(v, &c)
				sum += c
				return nil
			})
			release()
		}
		return sum == total, fmt.Sprintf("%d of %d tokens counted", sum, total)
	})
	el := time.Since(start)
	n.Kill()
	return pipeLines / el.Seconds()
}

// BenchmarkPipeline: lines through split -> tokens -> tally end to end
// against the same lines through wordcount alone, each round measuring both:
//
//	BENCH pipeline msgs=N rounds=K rate=R single_stage_rate=S ratio=X min=… max=…
func BenchmarkPipeline(b *testing.B) {
	if b.N > 1 {
		b.Skip("measured once at -benchtime 1x")
	}
	gctarget.Apply() // as a member does (serve)
	benchround.Run(b, benchround.Spec{
		Name: "pipeline", Params: fmt.Sprintf("msgs=%d", pipeLines), Rounds: 3, Headline: []string{"ratio"},
	}, func(r int) []benchround.Figure {
		var two, one float64
		if r%2 == 0 {
			two, one = pipelineRound(b, true), pipelineRound(b, false)
		} else {
			one, two = pipelineRound(b, false), pipelineRound(b, true)
		}
		return []benchround.Figure{benchround.F("rate", two, 0), benchround.F("single_stage_rate", one, 0), benchround.F("ratio", two/one, 2)}
	})
}
