package daemon

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/benchround"
	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/consumerd/consumerd/internal/natsproc"
	"github.com/consumerd/consumerd/shard"
)

// benchPublishLines is the input of BenchmarkPublish: about a second a
// side on a 2-core machine.
const benchPublishLines = 200_000

// BenchmarkPublish measures `consumerd publish` (Run, the CLI's own code:
// the topic look-up in etcd, the connection, the Publisher and the WAL
// adaptor) of benchPublishLines lines to a one-partition topic, against
// raw nats.go publishing the same lines with PublishMsgAsync (at most 4000
// pending, each with a Nats-Msg-Id as publish sets) to a fresh stream
// configured the same, in the same round (which side goes first flips each
// round), on a nats-server process of its own (its CPU is not the
// benchmark's). It prints
//
//	BENCH publish lines=200000 partitions=1 rate=… raw_rate=… ratio=… min=… max=…
//
// rate and raw_rate in lines per second, medians over the rounds
// (internal/benchround; CONSUMERD_BENCH_ROUNDS overrides 5), min and max
// of the per-round ratio. The goal is ratio >= 0.8.
func BenchmarkPublish(b *testing.B) {
	etcd := strings.Join(etcdtest.StartServer(b), ",")
	url, _ := natsproc.Start(b)
	var in strings.Builder
	for i := 1; i <= benchPublishLines; i++ {
		in.WriteString(inputLine(i) + "\n")
	}
	input := in.String()
	apps := []shard.App{wordcount.App()}
	cli := func(r int) float64 {
		topicName := fmt.Sprintf("bench%d", r)
		run := func(stdin string, args ...string) {
			var errb strings.Builder
			args = append(args, "--etcd.endpoints", etcd, "--wal.url", url)
			if code := Run(context.Background(), args, Options{Apps: apps, Stdin: strings.NewReader(stdin), Stdout: io.Discard, Stderr: &errb}); code != 0 {
				b.Fatalf("%v: exit %d: %s", args, code, errb.String())
			}
		}
		run("", "topics", "create", "--name", topicName, "--partitions", "1")
		start := time.Now()
		run(input, "publish", "--topic", topicName, "--timeout", "5m")
		return benchPublishLines / time.Since(start).Seconds()
	}
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := njs.New(nc, njs.WithPublishAsyncMaxPending(4000))
	if err != nil {
		b.Fatal(err)
	}
	raw := func(r int) float64 { return rawPublish(b, js, fmt.Sprintf("rawpublish%d", r), input) }
	b.ResetTimer()
	benchround.Run(b, benchround.Spec{
		Name:     "publish",
		Params:   fmt.Sprintf("lines=%d partitions=1", benchPublishLines),
		Rounds:   5,
		Headline: []string{"ratio"},
	}, func(r int) []benchround.Figure {
		var rate, rawRate float64
		if r%2 == 0 {
			rawRate, rate = raw(r), cli(r)
		} else {
			rate, rawRate = cli(r), raw(r)
		}
		return []benchround.Figure{
			benchround.F("rate", rate, 0), benchround.F("raw_rate", rawRate, 0),
			benchround.F("ratio", rate/rawRate, 2),
		}
	})
}

// rawPublish creates stream (file storage, 2-minute duplicate window, as
// consumerd's streams) and publishes every line of input to it with
// PublishMsgAsync and a Nats-Msg-Id, waiting for every acknowledgement; it
// returns lines per second, stream creation included (as publish's rate
// includes its set-up).
func rawPublish(b *testing.B, js njs.JetStream, stream, input string) float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	if _, err := js.CreateStream(ctx, njs.StreamConfig{
		Name: stream, Subjects: []string{stream + ".data"}, Storage: njs.FileStorage,
		Duplicates: 2 * time.Minute, AllowDirect: true,
	}); err != nil {
		b.Fatalf("create raw stream %s: %v", stream, err)
	}
	subj := stream + ".data"
	n := 0
	for line := range strings.Lines(input) {
		n++
		m := &nats.Msg{Subject: subj, Data: []byte(strings.TrimSuffix(line, "\n")), Header: nats.Header{}}
		m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("raw/%d", n))
		for {
			_, err := js.PublishMsgAsync(m)
			if err == nil {
				break
			}
			if err != njs.ErrTooManyStalledMsgs {
				b.Fatalf("raw PublishMsgAsync: %v", err)
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatal("raw publishes not acknowledged in 5m")
	}
	return float64(n) / time.Since(start).Seconds()
}
