package shard_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/embednats"
	"github.com/consumerd/consumerd/internal/freeport"
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

// TestPrimaryRestartsAfterNATSOutage: nats-server stops while a primary
// has a transaction open, so its commit fails and so does every reopen of
// the recovery log until the server is back. The primary restarts by
// itself (never FAILED), takes over again with the same term, and its
// counts are exact.
func TestPrimaryRestartsAfterNATSOutage(t *testing.T) {
	dir := t.TempDir()
	port := freeport.Port(t) // the server comes back on the same address
	srv := natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})
	held, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	app := shardtest.HookedApp(wordcount.Name, func(s shard.Shard, env topic.Envelope) error {
		if string(env.Message.Payload) == "stall here" {
			once.Do(func() { close(held); <-gate })
		}
		return nil
	})
	// A short ack timeout: the dead connection's appends fail in seconds.
	e := shardtest.NewCluster(t, jetstream.NewBuilder(jetstream.Config{URL: srv.URL(), AckTimeout: 2 * time.Second}), app)
	spec := shardtest.WordcountSpec("wc-0", 0, 0)
	e.PutSpec(spec)
	lines := append(shardtest.Corpus(5, 40), "stall here")
	e.Publish(0, lines...)
	n := e.StartNode("n", t.TempDir())
	e.Assign(n, spec.ID, 0)
	<-held
	srv.Shutdown()
	close(gate) // the transaction commits into a dead connection
	shardtest.Eventually(t, "the primary to report a restart", func() (bool, string) {
		st, _ := e.Status(n, spec.ID, 0)
		return st.State == allocator.StateBackfill && strings.Contains(st.Error, "restarting in"), fmt.Sprintf("status %+v", st)
	})
	natstest.StartServer(t, embednats.Config{StoreDir: dir, Port: port})
	e.WaitState(n, spec.ID, 0, allocator.StatePrimary)
	more := shardtest.Corpus(6, 20)
	e.Publish(0, more...)
	if d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(append(lines, more...))); d != "" {
		t.Fatalf("after the outage: %.500s", d)
	}
}
