package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
)

// TestOutboxRows stages transactions of outputs through the primary's
// publisher into real RocksDB batches, one of them larger than a row, and
// reads them back as a new primary does: every message, in staging order,
// with its key, payload and properties; rows written by earlier releases
// (version 1, a message per row) read alike.
func TestOutboxRows(t *testing.T) {
	sd, err := openShardDB(t.TempDir()+"/db", nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	sh := &primaryShard{ctx: context.Background(), db: sd.db, ro: sd.ro, wo: sd.wo}
	lookup := func(_ context.Context, name string) (topic.Description, error) {
		return topic.Description{Name: name, Partitions: 3}, nil
	}
	pub := &txnPublisher{sh: sh, topics: &topicCache{lookup: lookup}}

	var want, sealed []string
	big := strings.Repeat("x", 20_000) // txn 2: 150 of its 300 messages are 20 KB: 3 rows
	for txn, n := range []int{3, 300, 1} {
		sh.txn = grocksdb.NewWriteBatch()
		for i := range n {
			msg := message.MutableMessage{Key: fmt.Sprintf("k%d", i), Payload: []byte(fmt.Sprintf("t%d-%d-%s", txn+1, i, big[:i%2*len(big)]))}
			if i%3 == 0 {
				msg.Properties = map[string]string{"p": fmt.Sprint(i), "q": ""}
			}
			if err := pub.Publish("out", msg); err != nil {
				t.Fatal(err)
			}
			msg.Payload[0] = '!' // the app may reuse its buffer after Publish
			if msg.Properties != nil {
				msg.Properties["p"] = "changed"
			}
			part := topic.Partition{Topic: "out", Index: topic.PartitionFor(msg.Key, 3)}
			want = append(want, fmt.Sprintf("%d %s %s %q %v", txn+1, part.Channel(), msg.Key, "t"+string(msg.Payload[1:]), props(i)))
		}
		out := pub.seal(sh.txn)
		if out == nil || out.txn != uint64(txn+1) || len(out.outputs) != n {
			t.Fatalf("txn %d sealed as %+v", txn+1, out)
		}
		for _, o := range out.outputs {
			sealed = append(sealed, fmt.Sprintf("%d %s %s %q %v", out.txn, o.channel, o.msg.Key, o.msg.Payload, o.msg.Properties))
		}
		if err := sd.db.Write(sd.wo, sh.txn); err != nil {
			t.Fatal(err)
		}
		sh.txn.Destroy()
	}
	if rows := countRows(t, sd.db, sd.ro); rows != 1+3+1 {
		t.Errorf("%d outbox rows, want 5 (txn 2's 3 MB in rows of about %d bytes)", rows, outboxRowBytes)
	}
	// A version 1 row of an earlier release, txn 4.
	v1 := []byte{outboxRowV1}
	v1, _ = appendOutput(v1, "out/0001", &message.MutableMessage{Key: "old", Payload: []byte("v1")})
	if err := sd.db.Put(sd.wo, outboxKey(4, 0), v1); err != nil {
		t.Fatal(err)
	}
	want = append(want, `4 out/0001 old "v1" map[]`)

	pending, err := readBacklog(sd, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ot := range pending {
		for _, o := range ot.outputs {
			got = append(got, fmt.Sprintf("%d %s %s %q %v", ot.txn, o.channel, o.msg.Key, o.msg.Payload, o.msg.Properties))
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("read back %d messages, want %d; first difference at %d", len(got), len(want), firstDiff(got, want))
	}
	// What the sealed transactions hand the drainer is the same.
	if strings.Join(sealed, "\n") != strings.Join(want[:len(want)-1], "\n") {
		t.Fatalf("sealed %d messages, want %d; first difference at %d", len(sealed), len(want)-1, firstDiff(sealed, want))
	}
	if after, err := readBacklog(sd, 2, 4); err != nil || len(after) != 2 || after[0].txn != 3 {
		t.Fatalf("pending after txn 2: %d txns, %v", len(after), err)
	}
}

// readBacklog pages through the outbox rows of txns published+1..last.
func readBacklog(sd *shardDB, published, last uint64) ([]*outTxn, error) {
	b := newOutboxBacklog(sd.db, sd.ro, &outboxState{published: published, last: last, epoch: "e1"})
	var all []*outTxn
	for {
		p, err := b.page()
		if err != nil || len(p) == 0 {
			return all, err
		}
		all = append(all, p...)
	}
}

func props(i int) map[string]string {
	if i%3 != 0 {
		return nil
	}
	return map[string]string{"p": fmt.Sprint(i), "q": ""}
}

func countRows(t *testing.T, db *grocksdb.DB, ro *grocksdb.ReadOptions) int {
	it := db.NewIterator(ro)
	defer it.Close()
	n := 0
	for it.Seek(outboxPrefix); it.ValidForPrefix(outboxPrefix); it.Next() {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOutboxRowDamaged: a damaged row is an error naming it, never a
// partial or empty list of messages.
func TestOutboxRowDamaged(t *testing.T) {
	good, _ := appendOutput([]byte{outboxRowV2}, "out/0000", &message.MutableMessage{Key: "k", Payload: []byte("p"), Properties: map[string]string{"a": "b"}})
	good, _ = appendOutput(good, "out/0000", &message.MutableMessage{Key: "k2", Payload: []byte("p2")})
	if os, err := decodeRow(good); err != nil || len(os) != 2 {
		t.Fatalf("good row: %d messages, %v", len(os), err)
	}
	v1two := append([]byte{outboxRowV1}, good[1:]...)
	for name, row := range map[string][]byte{
		"empty":             {},
		"version 3":         append([]byte{3}, good[1:]...),
		"no messages":       {outboxRowV2},
		"truncated":         good[:len(good)-2],
		"v1 with two":       v1two,
		"huge property num": {outboxRowV2, 0, 0, 0, 0xff, 0xff, 0x03},
	} {
		if os, err := decodeRow(row); !errors.Is(err, errBadOutput) {
			t.Errorf("%s: %d messages, %v; want %v", name, len(os), err, errBadOutput)
		}
	}
}
