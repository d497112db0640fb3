package consumebench

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// rawTxnBytes caps one raw batch's input, as shard.DefaultTxnMaxBytes caps a
// transaction's.
const rawTxnBytes = 4 << 20

// rawOffsetsKey is where the raw loop keeps its input offset, written in the
// same batch as the state (what makes its state and offsets agree).
var rawOffsetsKey = []byte("\x00offsets")

// rawLoop is the baseline: a hand-written consumer of one partition with no
// framework. It reads the partition's stream with a nats.go ordered
// consumer; per message it reads the key's record from RocksDB (through the
// open batch's own writes first) and puts the next record into a
// WriteBatch. A batch of up to rawTxnBytes of input, or all that is
// pending, is written with the offsets key; then its outputs are published
// asynchronously to the partition's raw output stream, the previous batch's
// acknowledgements awaited first. RocksDB's own WAL is on (unsynced): the
// raw loop has no other log.
type rawLoop struct {
	js      njs.JetStream
	stream  string // the input partition's stream (consumerd's topic stream)
	subject string // its data subject
	outSubj string // the raw output stream's subject
	last    uint64 // stream sequence of the partition's last message
}

// newRawLoop prepares a raw loop over partition p of inputTopic: it creates
// the raw output stream (with replicas) and reads the input's last sequence.
func newRawLoop(tb testing.TB, js njs.JetStream, p, replicas int) *rawLoop {
	tb.Helper()
	tok, err := jetstream.EscapeChannel(topic.ChannelName(inputTopic, p))
	if err != nil {
		tb.Fatal(err)
	}
	l := &rawLoop{
		js:      js,
		stream:  jetstream.DefaultNamespace + "_" + tok,
		subject: jetstream.DefaultNamespace + "." + tok + ".data",
		outSubj: fmt.Sprintf("rawout.%d", p),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, njs.StreamConfig{
		Name: fmt.Sprintf("rawout_%d", p), Subjects: []string{l.outSubj}, Replicas: replicas,
	}); err != nil {
		tb.Fatalf("raw output stream: %v", err)
	}
	st, err := js.Stream(ctx, l.stream)
	if err != nil {
		tb.Fatalf("input stream %s: %v", l.stream, err)
	}
	m, err := st.GetLastMsgForSubject(ctx, l.subject)
	if err != nil {
		tb.Fatalf("input stream %s: last message: %v", l.stream, err)
	}
	l.last = m.Sequence
	return l
}

// run consumes the partition into a fresh RocksDB in dir until its last
// message is committed and every output acknowledged; it returns the
// number of messages consumed.
func (l *rawLoop) run(ctx context.Context, dir string) (int, error) {
	opts := shard.DefaultDBOptions() // the shard database's options
	opts.SetCreateIfMissing(true)
	defer opts.Destroy()
	db, err := grocksdb.OpenDb(opts, dir)
	if err != nil {
		return 0, fmt.Errorf("open rocksdb: %w", err)
	}
	defer db.Close()
	ro, wo := grocksdb.NewDefaultReadOptions(), grocksdb.NewDefaultWriteOptions()
	defer ro.Destroy()
	defer wo.Destroy()
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()

	cons, err := l.js.OrderedConsumer(ctx, l.stream, njs.OrderedConsumerConfig{FilterSubjects: []string{l.subject}})
	if err != nil {
		return 0, fmt.Errorf("ordered consumer: %w", err)
	}
	it, err := cons.Messages(njs.PullMaxMessages(1024))
	if err != nil {
		return 0, fmt.Errorf("consume: %w", err)
	}
	defer it.Stop()

	var (
		n        int
		written  = map[string][]byte{} // the open batch's records
		outs     []*nats.Msg           // the open batch's outputs
		inflight []njs.PubAckFuture    // the previous batch's outputs
		bytes    int
	)
	awaitAcks := func() error {
		for _, f := range inflight {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fmt.Errorf("publish output: %w", err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		inflight = inflight[:0]
		return nil
	}
	for {
		m, err := it.Next()
		if err != nil {
			return n, fmt.Errorf("next after %d messages: %w", n, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return n, err
		}
		q, err := url.ParseQuery(m.Headers().Get("Consumerd-Meta"))
		if err != nil {
			return n, fmt.Errorf("message %d: key header: %w", md.Sequence.Stream, err)
		}
		key := q.Get("k")
		dbKey := keyPrefix + key
		prev, ok := written[dbKey]
		if !ok {
			if prev, err = db.GetBytes(ro, []byte(dbKey)); err != nil {
				return n, err
			}
		}
		rec, err := nextRecord(prev, m.Data())
		if err != nil {
			return n, fmt.Errorf("key %q: %w", key, err)
		}
		written[dbKey] = rec
		wb.Put([]byte(dbKey), rec)
		outs = append(outs, &nats.Msg{Subject: l.outSubj, Data: rec, Header: nats.Header{"Consumerd-Meta": {"k=" + url.QueryEscape(key)}}})
		n++
		bytes += len(m.Data())
		if bytes < rawTxnBytes && md.NumPending > 0 {
			continue
		}
		wb.Put(rawOffsetsKey, strconv.AppendUint(nil, md.Sequence.Stream, 10))
		if err := db.Write(wo, wb); err != nil {
			return n, fmt.Errorf("commit: %w", err)
		}
		wb.Clear()
		clear(written)
		bytes = 0
		if err := awaitAcks(); err != nil {
			return n, err
		}
		for _, o := range outs {
			f, err := l.js.PublishMsgAsync(o)
			if err != nil {
				return n, fmt.Errorf("publish output: %w", err)
			}
			inflight = append(inflight, f)
		}
		outs = outs[:0]
		if md.Sequence.Stream >= l.last {
			return n, awaitAcks()
		}
	}
}
