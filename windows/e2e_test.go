package windows_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
	"github.com/consumerd/consumerd/windows"
)

const eventsParts, partialsParts = 2, 2

func e2eSpecs() []*shard.Spec {
	var out []*shard.Spec
	for p := 0; p < eventsParts; p++ {
		out = append(out, &shard.Spec{ID: fmt.Sprintf("%s-%04d", CountName, p), App: CountName, HotStandbys: 1,
			Sources: []shard.Source{{Topic: Events, Partition: p}}})
	}
	for p := 0; p < partialsParts; p++ {
		out = append(out, &shard.Spec{ID: fmt.Sprintf("%s-%04d", TotalName, p), App: TotalName, HotStandbys: 1,
			Sources: []shard.Source{{Topic: Partials, Partition: p}}})
	}
	return out
}

// TestTumblingCountThroughFailover runs both stages of the example app with
// a hot standby each, kills the primaries' node mid-stream and promotes the
// standbys. Events arrive in event-time order per partition (with ties),
// then each partition ends with a MaxTime mark. totals must hold every
// window exactly once with its model count: a window fired early would
// lose counts or be emitted twice, a lost or repeated partial would change
// its sum.
func TestTumblingCountThroughFailover(t *testing.T) {
	mem := memory.NewBuilder()
	e := shardtest.NewCluster(t, mem, CountApp(), TotalApp())
	eventsTopic := topic.Description{Name: Events, Partitions: eventsParts}
	e.PutTopic(eventsTopic)
	e.PutTopic(topic.Description{Name: Partials, Partitions: partialsParts})
	totalsTopic := topic.Description{Name: Totals, Partitions: partialsParts}
	e.PutTopic(totalsTopic)
	a, b := e.StartNode("a", t.TempDir()), e.StartNode("b", t.TempDir())
	for _, s := range e2eSpecs() {
		e.PutSpec(s)
		e.Assign(a, s.ID, 0)
		e.Assign(b, s.ID, 1)
	}
	for _, s := range e2eSpecs() {
		e.WaitState(a, s.ID, 0, allocator.StatePrimary)
		e.WaitState(b, s.ID, 1, allocator.StateStandby)
	}

	// Per partition, non-decreasing event times from -100 (negative windows
	// too), often repeating, sometimes skipping windows.
	const perPart = 250
	rng := rand.New(rand.NewPCG(1, 2))
	events := make([][]int64, eventsParts)
	want := map[int64]int64{}
	for p := range events {
		ts := int64(-100)
		for range perPart {
			ts += int64(rng.IntN(4)) * int64(rng.IntN(3))
			events[p] = append(events[p], ts)
			want[windows.Tumble(ts, WindowSize).Start]++
		}
	}
	publish := func(from, to int) {
		for p, evs := range events {
			for _, ts := range evs[from:to] {
				v := strconv.FormatInt(ts, 10)
				msg := message.MutableMessage{Key: v, Payload: []byte(v)}
				if _, err := e.Pub.PublishTo(context.Background(), topic.Partition{Topic: Events, Index: p}, msg); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	publish(0, perPart/2)
	a.Kill() // mid-stream: some windows fired and committed, maybe not published
	for _, s := range e2eSpecs() {
		e.Promote(b, s.ID, 1)
	}
	for _, s := range e2eSpecs() {
		e.WaitState(b, s.ID, 0, allocator.StatePrimary)
	}
	publish(perPart/2, perPart)
	end := windows.Mark{Sender: 0, Senders: 1, Time: windows.MaxTime}.Message()
	for p := 0; p < eventsParts; p++ {
		if _, err := e.Pub.PublishTo(context.Background(), topic.Partition{Topic: Events, Index: p}, end); err != nil {
			t.Fatal(err)
		}
	}

	var got []message.ImmutableMessage
	shardtest.Eventually(t, "totals to hold every window", func() (bool, string) {
		got = slices.Concat(e.ReadTopic(totalsTopic)...)
		return len(got) >= len(want), fmt.Sprintf("%d of %d windows", len(got), len(want))
	})
	totals := map[int64]int64{}
	for _, m := range got {
		start, n, err := ParseResult(m.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := totals[start]; dup {
			t.Errorf("window %d emitted twice", start)
		}
		totals[start] = n
	}
	if fmt.Sprint(totals) != fmt.Sprint(want) {
		t.Fatalf("totals per window start\n got %v\nwant %v", totals, want)
	}
	// Windows fired mid-stream, not only at the end of input: stage one
	// sent marks below MaxTime, interleaved with its partials.
	midMarks := 0
	for _, m := range slices.Concat(e.ReadTopic(topic.Description{Name: Partials, Partitions: partialsParts})...) {
		if mk, ok, err := windows.MarkOf(m); err != nil {
			t.Fatal(err)
		} else if ok && mk.Time != windows.MaxTime {
			midMarks++
		}
	}
	if midMarks == 0 {
		t.Errorf("partials holds no mark below MaxTime: the watermark never advanced mid-stream")
	}
	t.Logf("%d windows, %d mid-stream marks in partials", len(want), midMarks)
	// No shard counted a late message.
	for _, s := range e2eSpecs() {
		sh, release, ok := b.Service.Primary(s.ID)
		if !ok {
			t.Fatalf("%s: not primary on b", s.ID)
		}
		v, err := sh.Get(lateKey)
		release()
		if err != nil || v != nil {
			t.Errorf("%s: late messages %q (err %v)", s.ID, v, err)
		}
	}
}
