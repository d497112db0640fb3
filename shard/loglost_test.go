package shard_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/embednats"
	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// latestCounts is the last count the output topic's partition 0 holds for
// each token.
func latestCounts(t *testing.T, e *shardtest.Cluster) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, m := range e.ReadTopic(topic.Description{Name: wordcount.OutputTopic, Partitions: 1})[0] {
		c, err := strconv.ParseInt(string(m.Payload), 10, 64)
		if err != nil {
			t.Fatalf("payload %q: %v", m.Payload, err)
		}
		out[m.Key] = c
	}
	return out
}

func waitOutputs(t *testing.T, e *shardtest.Cluster, lines []string) {
	t.Helper()
	want := wordcount.Count(lines)
	shardtest.Eventually(t, "the output topic's latest counts exact", func() (bool, string) {
		d := shardtest.DiffCounts(latestCounts(t, e), want)
		return d == "", d
	})
}

// copyDir copies a directory tree (cp -a).
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v: %s", from, to, err, out)
	}
}

// TestRecoveryLogRestoredFromOlderCopy: the operator restores the recovery
// log stream's store directory from an older copy (nats-server stopped,
// the directory copied back, the server started), so the log lost
// transactions whose outputs were published. A new member with no local
// database rebuilds the shard from the log — nothing there says a tail is
// missing — and re-reads the sources from the offsets the log kept: its new
// transactions take the lost ones' numbers. The output chain's last marker
// covers a txn beyond the shard's own: the shard goes FAILED saying so
// (never taking new transactions for published); 'shards reset' starts a
// new outbox epoch and the outputs go on, exact.
func TestRecoveryLogRestoredFromOlderCopy(t *testing.T) {
	store := t.TempDir()
	port := freeport.Port(t)
	cfg := embednats.Config{StoreDir: store, Port: port}
	srv := natstest.StartServer(t, cfg)
	e := shardtest.NewCluster(t, jetstream.NewBuilder(jetstream.Config{URL: srv.URL()}), wordcount.App())
	e.TxnMaxMessages = 3 // many transactions: the lost tail holds several
	spec := shardtest.WordcountSpec("wc-0", 0, 0)
	e.PutSpec(spec)
	lines := shardtest.Corpus(11, 90)
	e.Publish(0, lines[:30]...)
	a := e.StartPrimary("a", t.TempDir(), spec)
	waitOutputs(t, e, lines[:30])
	a.Kill()

	logStream, err := jetstream.StreamName(jetstream.DefaultNamespace, recoverylog.Channel(spec.ID))
	if err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(store, "jetstream", "$G", "streams", logStream)
	older := filepath.Join(t.TempDir(), "older")
	srv.Shutdown()
	copyDir(t, logDir, older)
	srv = natstest.StartServer(t, cfg)

	e.Publish(0, lines[30:60]...)
	b := e.StartPrimary("b", t.TempDir(), spec)
	waitOutputs(t, e, lines[:60])
	b.Kill()
	srv.Shutdown()
	if err := os.RemoveAll(logDir); err != nil {
		t.Fatal(err)
	}
	copyDir(t, older, logDir)
	natstest.StartServer(t, cfg)

	c := e.StartNode("c", t.TempDir())
	e.Assign(c, spec.ID, 0)
	e.Publish(0, lines[60:63]...)
	st := e.WaitState(c, spec.ID, 0, allocator.StateFailed)
	for _, w := range []string{shard.ErrOutputsAhead.Error(), "counts/0000", "shards reset --shard wc-0", "its last marker is for txn"} {
		if !strings.Contains(st.Error, w) {
			t.Errorf("FAILED text does not say %q:\n%s", w, st.Error)
		}
	}

	// 'shards reset': a log reset term above every term so far.
	resp, err := e.Client.Get(context.Background(), "/")
	if err != nil {
		t.Fatal(err)
	}
	reset := *spec
	reset.LogResetTerm = resp.Header.Revision + 1
	e.PutSpec(&reset)
	reassign(t, e, c, spec.ID)
	e.WaitState(c, spec.ID, 0, allocator.StatePrimary)
	e.Publish(0, lines[63:]...)
	if d := shardtest.DiffCounts(e.Counts(c, &reset), wordcount.Count(lines)); d != "" {
		t.Fatalf("state after the reset: %.500s", d)
	}
	waitOutputs(t, e, lines)
	t.Logf("FAILED text: %s", st.Error)
}

// markersLost reads consumerd_shard_output_markers_lost_total for shard
// and channel from the default registry (0: no series).
func markersLost(t *testing.T, shardID, channel string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "consumerd_shard_output_markers_lost_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["shard"] == shardID && labels["channel"] == channel {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestOutputStreamRecreatedReported: the operator deletes and re-creates
// the output stream (`nats stream rm`, `nats stream add`) after a primary
// published counts there. The next primary, rebuilt from the recovery log
// on another member, finds the shard's record of the partition (its last
// marker, in the old stream's incarnation) and reports the lost markers —
// an ERROR and consumerd_shard_output_markers_lost_total — instead of
// taking the empty stream for one it never published to; it goes on
// publishing, and the new stream's counts are exact.
func TestOutputStreamRecreatedReported(t *testing.T) {
	srv := natstest.StartServer(t, embednats.Config{})
	e := shardtest.NewCluster(t, jetstream.NewBuilder(jetstream.Config{URL: srv.URL()}), wordcount.App())
	spec := shardtest.WordcountSpec("wc-0", 0, 0)
	e.PutSpec(spec)
	lines := shardtest.Corpus(12, 60)
	e.Publish(0, lines[:30]...)
	a := e.StartPrimary("a", t.TempDir(), spec)
	waitOutputs(t, e, lines[:30])
	a.Kill()

	admin := natstest.Admin(t, srv.URL())
	name, err := jetstream.StreamName(jetstream.DefaultNamespace, topic.ChannelName(wordcount.OutputTopic, 0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := admin.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if err := admin.DeleteStream(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	before := markersLost(t, spec.ID, "counts/0000")
	b := e.StartPrimary("b", t.TempDir(), spec)
	e.Publish(0, lines[30:]...)
	want := wordcount.Count(lines)
	shardtest.Eventually(t, "the new stream's counts of the new lines", func() (bool, string) {
		got := latestCounts(t, e)
		for _, l := range lines[30:] {
			for tok := range wordcount.Count([]string{l}) {
				if got[tok] != want[tok] {
					return false, fmt.Sprintf("%q: %d, want %d", tok, got[tok], want[tok])
				}
			}
		}
		return true, ""
	})
	if got := markersLost(t, spec.ID, "counts/0000") - before; got != 1 {
		t.Fatalf("%v lost chains reported for counts/0000, want 1 (the stream was re-created under the shard's markers)", got)
	}
	if st, _ := e.Status(b, spec.ID, 0); st.State != allocator.StatePrimary {
		t.Fatalf("status %+v, want PRIMARY: the loss is reported, the shard goes on", st)
	}
}
