package topic_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// TestPublisherIdempotentByDefault: messages published without a DedupeID
// get one, so the WAL's retries of appends whose acknowledgement was lost
// (every fifth here, as when a broker restarts) neither fail them nor store
// them twice: every publish succeeds and the partition holds each message
// once, in call order.
func TestPublisherIdempotentByDefault(t *testing.T) {
	mem := memory.NewBuilder()
	var mu sync.Mutex
	lost := map[string]bool{}
	mem.SetAppendHook(func(_ string, m *message.MutableMessage, st memory.Stage) error {
		mu.Lock()
		defer mu.Unlock()
		if st != memory.AfterStore {
			return nil
		}
		if n, _ := strconv.Atoi(string(m.Payload)); n%5 == 0 && !lost[string(m.Payload)] {
			lost[string(m.Payload)] = true
			return errors.New("acknowledgement lost")
		}
		return nil
	})
	op, err := wal.NewOpenerBuilder(mem).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	pub := topic.NewPublisher(op, nil)
	defer pub.Close()
	d := topic.Description{Name: "events", Partitions: 1}
	const n = 50
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Add(n)
	for i := 0; i < n; i++ {
		pub.PublishAsync(context.Background(), d, message.MutableMessage{Key: "k", Payload: []byte(strconv.Itoa(i))},
			func(_ topic.Partition, _ message.MessageID, err error) {
				errs[i] = err
				wg.Done()
			})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	got := readPartition(t, op, topic.Partition{Topic: "events"})
	if len(got) != n {
		t.Fatalf("partition holds %d messages, want %d (each once)", len(got), n)
	}
	for i, e := range got {
		if string(e.Message.Payload) != strconv.Itoa(i) {
			t.Fatalf("message %d is %q, want %d: call order", i, e.Message.Payload, i)
		}
	}
}
