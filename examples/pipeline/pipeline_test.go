package pipeline_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/pipeline"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const linesParts, tokensParts = 2, 3

func specs() []*shard.Spec {
	var out []*shard.Spec
	for p := 0; p < linesParts; p++ {
		out = append(out, &shard.Spec{ID: fmt.Sprintf("split-%04d", p), App: pipeline.SplitName, HotStandbys: 1,
			Sources: []shard.Source{{Topic: pipeline.Lines, Partition: p}}})
	}
	for p := 0; p < tokensParts; p++ {
		out = append(out, &shard.Spec{ID: fmt.Sprintf("tally-%04d", p), App: pipeline.TallyName, HotStandbys: 1,
			Sources: []shard.Source{{Topic: pipeline.Tokens, Partition: p}}})
	}
	return out
}

// TestPipelineExactThroughFailover runs split and tally with a hot standby
// each on two nodes, kills the primaries' node midway and promotes the
// standbys: tokens holds every token occurrence exactly once, each in its
// key's partition, and tally's counts equal the corpus.
func TestPipelineExactThroughFailover(t *testing.T) {
	mem := memory.NewBuilder()
	e := shardtest.NewCluster(t, mem, pipeline.Split(), pipeline.Tally())
	e.PutTopic(topic.Description{Name: pipeline.Lines, Partitions: linesParts})
	e.PutTopic(topic.Description{Name: pipeline.Tokens, Partitions: tokensParts})
	e.PutTopic(topic.Description{Name: pipeline.Totals, Partitions: tokensParts})
	a, b := e.StartNode("a", t.TempDir()), e.StartNode("b", t.TempDir())
	for _, s := range specs() {
		e.PutSpec(s)
		e.Assign(a, s.ID, 0)
		e.Assign(b, s.ID, 1)
	}
	for _, s := range specs() {
		e.WaitState(a, s.ID, 0, allocator.StatePrimary)
		e.WaitState(b, s.ID, 1, allocator.StateStandby)
	}
	lines := shardtest.Corpus(5, 400)
	linesTopic := topic.Description{Name: pipeline.Lines, Partitions: linesParts}
	publish := func(ls []string) {
		for _, l := range ls {
			if _, _, err := e.Pub.Publish(context.Background(), linesTopic, message.MutableMessage{Key: l, Payload: []byte(l)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(lines[:200])
	a.Kill() // mid-stream: some outputs committed, maybe not published
	for _, s := range specs() {
		e.Promote(b, s.ID, 1)
	}
	for _, s := range specs() {
		e.WaitState(b, s.ID, 0, allocator.StatePrimary)
	}
	publish(lines[200:])

	want := pipeline.Count(lines)
	var total int64
	for _, n := range want {
		total += n
	}
	tokens := topic.Description{Name: pipeline.Tokens, Partitions: tokensParts}
	var got []message.ImmutableMessage
	shardtest.Eventually(t, "tokens to hold every token occurrence", func() (bool, string) {
		got = slices.Concat(e.ReadTopic(tokens)...)
		return int64(len(got)) >= total, fmt.Sprintf("%d of %d", len(got), total)
	})
	perKey := map[string]int64{}
	for _, m := range got {
		perKey[m.Key]++
		if p := topic.PartitionFor(m.Key, tokensParts); m.Channel != topic.ChannelName(pipeline.Tokens, p) {
			t.Fatalf("token %q in %s, want partition %d", m.Key, m.Channel, p)
		}
	}
	if d := shardtest.DiffCounts(perKey, want); d != "" || int64(len(got)) != total {
		t.Fatalf("tokens topic: %d messages for %d occurrences: %s", len(got), total, d)
	}
	// tally: each token on exactly one shard, with the corpus count.
	counts := map[string]int64{}
	for p := 0; p < tokensParts; p++ {
		id := fmt.Sprintf("tally-%04d", p)
		var part map[string]int64
		shardtest.Eventually(t, id+" to count every token", func() (bool, string) {
			sh, release, ok := b.Service.Primary(id)
			if !ok {
				return false, "not primary"
			}
			defer release()
			part = map[string]int64{}
			err := pipeline.Tally().Scan(sh, func(k, v string) error {
				n, err := strconv.ParseInt(v, 10, 64)
				part[k] = n
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			var sum, wantSum int64
			for k, n := range part {
				sum += n
				if topic.PartitionFor(k, tokensParts) != p {
					t.Fatalf("%s holds token %q of partition %d", id, k, topic.PartitionFor(k, tokensParts))
				}
			}
			for k, n := range want {
				if topic.PartitionFor(k, tokensParts) == p {
					wantSum += n
				}
			}
			return sum == wantSum, fmt.Sprintf("%d of %d", sum, wantSum)
		})
		for k, n := range part {
			counts[k] = n
		}
	}
	if d := shardtest.DiffCounts(counts, want); d != "" {
		t.Fatalf("tally counts: %s", d)
	}
	// totals: the last value of each token is its count.
	last := map[string]int64{}
	shardtest.Eventually(t, "totals to catch up", func() (bool, string) {
		for _, m := range slices.Concat(e.ReadTopic(topic.Description{Name: pipeline.Totals, Partitions: tokensParts})...) {
			n, _ := strconv.ParseInt(string(m.Payload), 10, 64)
			last[m.Key] = n
		}
		d := shardtest.DiffCounts(last, want)
		return d == "", d
	})
	_ = time.Second
}
