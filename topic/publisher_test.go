package topic_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newOpener(t *testing.T) wal.Opener {
	t.Helper()
	op, err := wal.NewOpenerBuilder(memory.NewBuilder()).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	return op
}

// readPartition reads every message of a partition (up to its LastID).
func readPartition(t *testing.T, op wal.Opener, p topic.Partition) []topic.Envelope {
	t.Helper()
	ctx := context.Background()
	w, err := op.Open(ctx, &wal.OpenOption{Channel: p.Channel()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	last, err := w.LastID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if last == 0 {
		return nil
	}
	s, err := w.Read(ctx, wal.ReadOption{DeliverPolicy: wal.DeliverAll()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []topic.Envelope
	for {
		select {
		case m := <-s.Chan():
			out = append(out, topic.Envelope{Partition: p, Message: m})
			if m.ID >= last {
				return out
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: stalled after %d messages", p, len(out))
		}
	}
}

func TestPublishRoutesByKey(t *testing.T) {
	op := newOpener(t)
	pub := topic.NewPublisher(op, nil)
	defer pub.Close()
	d := topic.Description{Name: "words", Partitions: 4}
	ctx := context.Background()
	const n = 200
	want := make(map[topic.Partition][]string)
	for i := 0; i < n; i++ {
		key := "key-" + strconv.Itoa(i)
		part, id, err := pub.Publish(ctx, d, message.MutableMessage{Key: key, Payload: []byte(strconv.Itoa(i))})
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if part.Topic != "words" || part.Index != topic.PartitionFor(key, 4) || id == 0 {
			t.Fatalf("publish %q went to %v id %d, want partition %d", key, part, id, topic.PartitionFor(key, 4))
		}
		want[part] = append(want[part], key)
	}
	total := 0
	for i := 0; i < d.Partitions; i++ {
		p := topic.Partition{Topic: "words", Index: i}
		got := readPartition(t, op, p)
		if len(got) != len(want[p]) {
			t.Fatalf("%s holds %d messages, want %d", p, len(got), len(want[p]))
		}
		for j, e := range got {
			if e.Message.Key != want[p][j] || e.Message.Channel != p.Channel() {
				t.Fatalf("%s message %d: key %q channel %q, want key %q", p, j, e.Message.Key, e.Message.Channel, want[p][j])
			}
		}
		if len(got) == 0 {
			t.Errorf("%s got no keys out of %d", p, n)
		}
		total += len(got)
	}
	if total != n {
		t.Fatalf("%d messages in all partitions, want %d", total, n)
	}
}

func TestPublishAsyncOrderAndPublishTo(t *testing.T) {
	op := newOpener(t)
	pub := topic.NewPublisher(op, nil)
	defer pub.Close()
	ctx := context.Background()
	d := topic.Description{Name: "events", Partitions: 2}
	// Same key: same partition, stored in call order.
	const n = 100
	var wg sync.WaitGroup
	wg.Add(n)
	var mu sync.Mutex
	var ids []message.MessageID
	for i := 0; i < n; i++ {
		pub.PublishAsync(ctx, d, message.MutableMessage{Key: "same", Payload: []byte(strconv.Itoa(i))},
			func(p topic.Partition, id message.MessageID, err error) {
				defer wg.Done()
				if err != nil {
					t.Errorf("async %d: %v", i, err)
					return
				}
				if p.Index != topic.PartitionFor("same", 2) {
					t.Errorf("async %d went to %v", i, p)
				}
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			})
	}
	wg.Wait()
	got := readPartition(t, op, topic.Partition{Topic: "events", Index: topic.PartitionFor("same", 2)})
	if len(got) != n {
		t.Fatalf("%d messages, want %d", len(got), n)
	}
	for i, e := range got {
		if string(e.Message.Payload) != strconv.Itoa(i) {
			t.Fatalf("position %d holds %q: not call order", i, e.Message.Payload)
		}
	}
	// PublishTo ignores the key.
	other := topic.Partition{Topic: "events", Index: 1 - topic.PartitionFor("same", 2)}
	id, err := pub.PublishTo(ctx, other, message.MutableMessage{Key: "same", Payload: []byte("explicit")})
	if err != nil || id == 0 {
		t.Fatalf("PublishTo: %d, %v", id, err)
	}
	if got := readPartition(t, op, other); len(got) != 1 || string(got[0].Message.Payload) != "explicit" {
		t.Fatalf("explicit partition holds %v", got)
	}
}

func TestPublishConcurrentFirstUse(t *testing.T) {
	op := newOpener(t)
	pub := topic.NewPublisher(op, nil)
	defer pub.Close()
	p := topic.Partition{Topic: "c", Index: 0}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if _, err := pub.PublishTo(context.Background(), p, message.MutableMessage{Payload: []byte(fmt.Sprint(g, i))}); err != nil {
					t.Errorf("publish: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if got := readPartition(t, op, p); len(got) != 160 {
		t.Fatalf("%d messages, want 160", len(got))
	}
}

func TestPublishErrors(t *testing.T) {
	op := newOpener(t)
	pub := topic.NewPublisher(op, nil)
	ctx := context.Background()
	if _, _, err := pub.Publish(ctx, topic.Description{Name: "x", Partitions: 0}, message.MutableMessage{}); err == nil {
		t.Fatal("publish to a topic with 0 partitions succeeded")
	}
	if _, err := pub.PublishTo(ctx, topic.Partition{Topic: "bad name", Index: 0}, message.MutableMessage{}); err == nil {
		t.Fatal("publish to a bad topic name succeeded")
	}
	if _, err := pub.PublishTo(ctx, topic.Partition{Topic: "x", Index: -1}, message.MutableMessage{}); err == nil {
		t.Fatal("publish to partition -1 succeeded")
	}
	done := make(chan error, 1)
	pub.PublishAsync(ctx, topic.Description{Name: "", Partitions: 1}, message.MutableMessage{},
		func(_ topic.Partition, _ message.MessageID, err error) { done <- err })
	if err := <-done; err == nil {
		t.Fatal("async publish with an empty topic name succeeded")
	}
	if _, err := pub.PublishTo(ctx, topic.Partition{Topic: "x", Index: 0}, message.MutableMessage{Payload: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	pub.Close()
	if _, err := pub.PublishTo(ctx, topic.Partition{Topic: "x", Index: 0}, message.MutableMessage{}); !errors.Is(err, wal.ErrClosed) {
		t.Fatalf("publish after Close: %v, want ErrClosed", err)
	}
	// A cancelled context fails the publish.
	pub2 := topic.NewPublisher(op, nil)
	defer pub2.Close()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := pub2.PublishTo(cctx, topic.Partition{Topic: "x", Index: 0}, message.MutableMessage{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("publish with a cancelled ctx: %v, want context.Canceled", err)
	}
}
