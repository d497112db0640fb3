package wordcount_test

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go v1.55.0 (object store, reconnects): this goroutine may start
		// after the connection closed and then waits on a nil channel forever
		// (third party; recoverylog/snapshot ignores it for the same reason).
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
}

func TestCount(t *testing.T) {
	got := wordcount.Count([]string{"the cat", "  the\tdog  ", "", "the\ncat the"})
	want := map[string]int64{"the": 4, "cat": 2, "dog": 1}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Count = %v, want %v", got, want)
	}
}

func TestMerge(t *testing.T) {
	cases := []struct{ a, b, want, err string }{
		{"1", "2", "3", ""},
		{"0", "0", "0", ""},
		{"9223372036854775806", "1", "9223372036854775807", ""},
		{"x", "1", "", `"x" is not a count`},
		{"1", "", "", `"" is not a count`},
	}
	for _, c := range cases {
		got, err := wordcount.Merge(c.a, c.b)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Merge(%q,%q) err = %v, want %q", c.a, c.b, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Merge(%q,%q) = %q, %v; want %q", c.a, c.b, got, err, c.want)
		}
	}
}

func TestAppValid(t *testing.T) {
	app := wordcount.App()
	if err := app.Validate(); err != nil {
		t.Fatal(err)
	}
	if app.Name != "wordcount" || !reflect.DeepEqual(app.Topics, []string{"words"}) || !reflect.DeepEqual(app.Outputs, []string{"counts"}) {
		t.Fatalf("app %+v", app)
	}
}

// TestCountsQueryAndOutput runs wordcount in a shard: the stored counts are
// exact, Query answers per token, and the last count published to
// "counts" for every token equals its stored count.
func TestCountsQueryAndOutput(t *testing.T) {
	e := shardtest.NewCluster(t, memory.NewBuilder(), wordcount.App())
	spec := shardtest.WordcountSpec("wordcount-0001", 1, 0)
	e.PutSpec(spec)
	lines := shardtest.Corpus(4, 100)
	e.Publish(1, lines...)
	n := e.StartNode("n", t.TempDir())
	e.Assign(n, spec.ID, 0)
	e.WaitState(n, spec.ID, 0, allocator.StatePrimary)
	want := wordcount.Count(lines)
	if d := shardtest.DiffCounts(e.Counts(n, spec), want); d != "" {
		t.Fatal(d)
	}

	sh, release, ok := n.Service.Primary(spec.ID)
	if !ok {
		t.Fatal("no primary")
	}
	for tok, c := range want {
		v, found, err := wordcount.Query(sh, tok)
		if err != nil || !found || v != strconv.FormatInt(c, 10) {
			t.Errorf("Query(%q) = %q %v %v, want %d", tok, v, found, err, c)
		}
	}
	if _, found, err := wordcount.Query(sh, "absent"); found || err != nil {
		t.Errorf("Query(absent) = %v %v", found, err)
	}

	if p := sh.Partition(); p != 1 {
		t.Errorf("Partition() = %d, want 1", p)
	}
	release()

	// Output: partition 1 of "counts" (the shard's partition). Outputs
	// are published after their transaction commits, so they may trail the
	// stored counts for a moment.
	waitPublished(t, e, 1, want)
}

// TestOutputOfMultiPartitionShard: a shard whose sources name two
// partitions of "words" (a spec `shards apply` accepts) has Partition -1,
// and publishes its counts to the lowest of its partitions of "counts".
func TestOutputOfMultiPartitionShard(t *testing.T) {
	e := shardtest.NewCluster(t, memory.NewBuilder(), wordcount.App())
	spec := &shard.Spec{ID: "wordcount-multi", App: wordcount.Name, Sources: []shard.Source{
		{Topic: wordcount.InputTopic, Partition: 2}, {Topic: wordcount.InputTopic, Partition: 1},
	}}
	e.PutSpec(spec)
	lines := shardtest.Corpus(5, 80)
	e.Publish(2, lines[:40]...)
	e.Publish(1, lines[40:]...)
	n := e.StartNode("n", t.TempDir())
	e.Assign(n, spec.ID, 0)
	e.WaitState(n, spec.ID, 0, allocator.StatePrimary)
	want := wordcount.Count(lines)
	if d := shardtest.DiffCounts(e.Counts(n, spec), want); d != "" {
		t.Fatal(d)
	}
	sh, release, ok := n.Service.Primary(spec.ID)
	if !ok {
		t.Fatal("no primary")
	}
	if p := sh.Partition(); p != -1 {
		t.Errorf("Partition() = %d, want -1 for sources on partitions 2 and 1", p)
	}
	release()
	waitPublished(t, e, 1, want)
	if last := e.LastID(topic.ChannelName(wordcount.OutputTopic, 2)); last != 0 {
		t.Errorf("counts/0002 has %d messages, want none", last)
	}
}

// waitPublished waits until the last counts published to partition p of
// "counts" equal want.
func waitPublished(t *testing.T, e *shardtest.Cluster, p int, want map[string]int64) {
	t.Helper()
	shardtest.Eventually(t, "published counts", func() (bool, string) {
		got := publishedCounts(t, e, p)
		return reflect.DeepEqual(got, want), fmt.Sprintf("published %v, want %v", got, want)
	})
}

// publishedCounts reads partition p of "counts" to its end and returns the
// last count published for every token, checking that none went down.
func publishedCounts(t *testing.T, e *shardtest.Cluster, p int) map[string]int64 {
	t.Helper()
	ch := topic.ChannelName(wordcount.OutputTopic, p)
	w, err := e.Opener.Open(context.Background(), &wal.OpenOption{Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	last, err := w.LastID(context.Background())
	if err != nil {
		t.Fatalf("%s last id: %v", ch, err)
	}
	published := map[string]int64{}
	if last == 0 {
		return published
	}
	sc, err := w.Read(context.Background(), wal.ReadOption{DeliverPolicy: wal.DeliverAll()})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	for msg := range sc.Chan() {
		c, err := strconv.ParseInt(string(msg.Payload), 10, 64)
		if err != nil {
			t.Fatalf("payload %q", msg.Payload)
		}
		if c < published[msg.Key] {
			t.Fatalf("count of %q went down: %d after %d", msg.Key, c, published[msg.Key])
		}
		published[msg.Key] = c
		if msg.ID == last {
			break
		}
	}
	return published
}
