package wordcount_test

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
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
	if got := app.NewConsumer().Topics(); !reflect.DeepEqual(got, []string{"words"}) {
		t.Fatalf("Topics = %v", got)
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
	release()

	// Output: partition 1 of "counts" (the shard's partition).
	w, err := e.Opener.Open(context.Background(), &wal.OpenOption{Channel: topic.ChannelName(wordcount.OutputTopic, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	last, err := w.LastID(context.Background())
	if err != nil || last == 0 {
		t.Fatalf("counts/0001 last id %d, %v", last, err)
	}
	sc, err := w.Read(context.Background(), wal.ReadOption{DeliverPolicy: wal.DeliverAll()})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	published := map[string]int64{}
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
	if !reflect.DeepEqual(published, want) {
		t.Fatalf("published counts %v, want %v", published, want)
	}
}
