package topic_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
)

// TestReaderToHeads: a Reader stops at each partition's head as of its
// opening, whatever is stored after; FromHead reads nothing and FromID
// starts at the id.
func TestReaderToHeads(t *testing.T) {
	op := newOpener(t)
	ctx := t.Context()
	d := topic.Description{Name: "t", Partitions: 2}
	pub := topic.NewPublisher(op, nil)
	defer pub.Close()
	put := func(p, n int) {
		for i := range n {
			if _, err := pub.PublishTo(ctx, topic.Partition{Topic: "t", Index: p}, message.MutableMessage{Key: fmt.Sprint(p, ".", i), Payload: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(0, 3)
	put(1, 2)
	read := func(start topic.Start, parts ...int) string {
		var got []string
		r, err := topic.OpenReader(ctx, topic.ReaderConfig{Opener: op, Topic: d.Name, Partitions: parts, Start: start,
			Deliver: func(p int, m *message.ImmutableMessage) error {
				got = append(got, m.Key)
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		put(0, 1) // after the heads were taken: not read
		if err := r.ToHeads(ctx); err != nil {
			t.Fatal(err)
		}
		return strings.Join(got, " ")
	}
	if got := read(topic.FromOldest(), 0, 1); got != "0.0 0.1 0.2 1.0 1.1" {
		t.Errorf("from the oldest: %s", got)
	}
	if got := read(topic.FromHead(), 0, 1); got != "" {
		t.Errorf("from the head: %s", got)
	}
	if got := read(topic.FromID(2), 1); got != "1.1" {
		t.Errorf("from id 2 of partition 1: %s", got)
	}
}

// TestReaderFollow: Follow delivers what is stored after the Reader opened,
// flushing after each message, and returns nil when ctx ends.
func TestReaderFollow(t *testing.T) {
	op := newOpener(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pub := topic.NewPublisher(op, nil)
	defer pub.Close()
	var got []string
	flushes := 0
	r, err := topic.OpenReader(ctx, topic.ReaderConfig{Opener: op, Topic: "t", Partitions: []int{0}, Start: topic.FromHead(),
		Deliver: func(_ int, m *message.ImmutableMessage) error {
			got = append(got, m.Key)
			if len(got) == 2 {
				cancel()
			}
			return nil
		},
		Flush: func() error { flushes++; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, k := range []string{"a", "b"} {
		if _, err := pub.PublishTo(ctx, topic.Partition{Topic: "t", Index: 0}, message.MutableMessage{Key: k, Payload: []byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Follow(ctx); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != "a b" || flushes != 2 {
		t.Errorf("followed %q with %d flushes, want a b with 2", got, flushes)
	}
}

func TestParseStart(t *testing.T) {
	for in, want := range map[string]string{"start": "start", "end": "end", "7": "id 7", "0": "error", "x": "error"} {
		s, err := topic.ParseStart(in)
		got := s.String()
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("ParseStart(%q) = %s, want %s", in, got, want)
		}
	}
}
