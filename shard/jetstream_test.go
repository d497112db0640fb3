package shard_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// TestWordcountOnJetStream runs two wordcount shards on a real embedded
// JetStream: input routed by key, a transaction whose batch exceeds
// JetStream's 1 MiB message limit, a primary killed and its standby
// promoted, and exact merged counts at the end.
func TestWordcountOnJetStream(t *testing.T) {
	url := natstest.Start(t)
	e := shardtest.NewCluster(t, jetstream.NewBuilder(jetstream.Config{URL: url}), wordcount.App())
	e.TxnMaxMessages = 50
	specs := []*shardtestSpec{{shardtest.WordcountSpec("wc-0", 0, 1)}, {shardtest.WordcountSpec("wc-1", 1, 0)}}
	for _, s := range specs {
		e.PutSpec(s.Spec)
	}
	desc := topic.Description{Name: wordcount.InputTopic, Partitions: 2}
	publish := func(lines ...string) {
		t.Helper()
		for _, l := range lines {
			key := l
			if len(key) > 64 {
				key = key[:64] // the key travels in a header
			}
			if _, _, err := e.Pub.Publish(context.Background(), desc, message.MutableMessage{Key: key, Payload: []byte(l)}); err != nil {
				t.Fatalf("publish: %v", err)
			}
		}
	}
	// One message of 55k distinct tokens: its transaction's batch is over
	// 1 MiB, so the recovery log must carry it in chunks.
	var big strings.Builder
	for i := 0; i < 55000; i++ {
		fmt.Fprintf(&big, "bigtoken-%06d ", i)
	}
	lines := append(shardtest.Corpus(21, 200), big.String())
	publish(lines[:100]...)
	publish(lines[200])

	a := e.StartNode("a", t.TempDir())
	b := e.StartNode("b", t.TempDir())
	e.Assign(a, "wc-0", 0)
	e.Assign(b, "wc-0", 1)
	e.Assign(b, "wc-1", 0)
	e.WaitState(a, "wc-0", 0, allocator.StatePrimary)
	e.WaitState(b, "wc-0", 1, allocator.StateStandby)
	publish(lines[100:150]...)
	merged := func(primaries map[string]*shardtest.Node) map[string]int64 {
		out := map[string]int64{}
		for _, s := range specs {
			for k, v := range e.Counts(primaries[s.ID], s.Spec) {
				out[k] += v
			}
		}
		return out
	}
	if d := shardtest.DiffCounts(merged(map[string]*shardtest.Node{"wc-0": a, "wc-1": b}), wordcount.Count(append(lines[:150:150], lines[200]))); d != "" {
		t.Fatalf("before failover: %.500s", d)
	}

	a.Kill()
	e.Promote(b, "wc-0", 1)
	e.WaitState(b, "wc-0", 0, allocator.StatePrimary)
	publish(lines[150:200]...)
	if d := shardtest.DiffCounts(merged(map[string]*shardtest.Node{"wc-0": b, "wc-1": b}), wordcount.Count(lines)); d != "" {
		t.Fatalf("after failover: %.500s", d)
	}
}

type shardtestSpec struct{ *shard.Spec }
