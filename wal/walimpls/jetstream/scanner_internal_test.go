package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/internal/natstest"
)

func TestParseAckReplyTable(t *testing.T) {
	for _, tc := range []struct {
		reply string
		seq   uint64
		ts    int64
		ok    bool
	}{
		{"$JS.ACK.S.C.1.42.7.1700000000000000001.0", 42, 1700000000000000001, true},
		{"$JS.ACK._.HASH.S.C.1.43.8.1700000000000000002.5.tok", 43, 1700000000000000002, true},
		{"$JS.ACK.dom.HASH.S.C.1.44.9.1700000000000000003.5", 44, 1700000000000000003, true},
		{"$JS.ACK.S.C.1.x.7.1.0", 0, 0, false},
		{"$JS.ACK.S.C.1.42.7.notanumber.0", 0, 0, false},
		{"$JS.ACK.S.C.1.42", 0, 0, false},
		{"$JS.ACK.a.b.c.d.e.f.g.h", 0, 0, false}, // 8 tokens: neither v1 nor v2
		{"_INBOX.x", 0, 0, false},
		{"", 0, 0, false},
	} {
		seq, ts, ok := parseAckReply(tc.reply)
		if ok != tc.ok || (ok && (seq != tc.seq || ts.UnixNano() != tc.ts)) {
			t.Errorf("parseAckReply(%q) = %d, %d, %v; want %d, %d, %v", tc.reply, seq, ts.UnixNano(), ok, tc.seq, tc.ts, tc.ok)
		}
	}
}

// The fast parse agrees with nats.go's Metadata on what a real server sends.
func TestParseAckReplyMatchesMetadata(t *testing.T) {
	url := natstest.Start(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "P", Subjects: []string{"p"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := js.Publish(ctx, "p", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(3)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		seq, ts, ok := parseAckReply(m.Reply())
		if !ok || seq != md.Sequence.Stream || !ts.Equal(md.Timestamp) {
			t.Fatalf("parseAckReply(%q) = %d, %v, %v; Metadata says %d, %v", m.Reply(), seq, ts, ok, md.Sequence.Stream, md.Timestamp)
		}
		n++
	}
	if n != 3 {
		t.Fatalf("fetched %d messages, want 3", n)
	}
}
