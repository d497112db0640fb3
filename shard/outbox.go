package shard

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
)

// The outbox: exactly-once outputs.
//
// A message an app publishes in a transaction is a row of the transaction's
// batch, committed with the state and the offsets:
//
//	\x00consumerd/outbox/<txn:016x>/<i:08x>  row i of txn's messages (appendOutput)
//	\x00consumerd/outbox-last                the last txn that staged outputs
//	\x00consumerd/outbox-published           every txn up to this one is published
//	\x00consumerd/outbox-epoch               the shard's outbox incarnation
//
// txn numbers the transactions that staged outputs, from 1, in commit
// order; it is shard state (replayed by standbys, restored from snapshots),
// so a zombie primary and its successor number the same committed
// transaction alike. Once a commit is applied the drainer (drain.go)
// publishes its rows; a later commit records outbox-published and deletes
// the rows up to it.
//
// The marker chain of a shard on an output partition is "<shard>.<epoch>":
// the epoch is random, made with the shard's first output, so a shard
// re-created from nothing (its txn numbers starting over) never mistakes an
// old incarnation's markers for its own.
var (
	outboxPrefix       = []byte("\x00consumerd/outbox/")
	outboxLastKey      = []byte("\x00consumerd/outbox-last")
	outboxPublishedKey = []byte("\x00consumerd/outbox-published")
	outboxEpochKey     = []byte("\x00consumerd/outbox-epoch")
)

// outboxKey is the key of txn's row i: outboxPrefix, then txn as 16 and i as 8
// lowercase hex digits, separated by '/' (so rows sort by txn, then i).
func outboxKey(txn uint64, i int) []byte {
	k := make([]byte, len(outboxPrefix)+25)
	n := copy(k, outboxPrefix)
	putHex(k[n:n+16], txn)
	k[n+16] = '/'
	putHex(k[n+17:], uint64(uint32(i)))
	return k
}

// putHex writes v into dst as len(dst) lowercase hex digits, zero-padded.
func putHex(dst []byte, v uint64) {
	const digits = "0123456789abcdef"
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = digits[v&0xf]
		v >>= 4
	}
}

// outboxTxnStart is the first key of txn's rows (DeleteRange bounds).
func outboxTxnStart(txn uint64) []byte {
	return fmt.Appendf(append([]byte(nil), outboxPrefix...), "%016x/", txn)
}

// parseOutboxKey returns the txn and index of an outbox row key.
func parseOutboxKey(k []byte) (txn uint64, i int, err error) {
	rest, ok := strings.CutPrefix(string(k), string(outboxPrefix))
	t, n, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || len(t) != 16 || len(n) != 8 {
		return 0, 0, fmt.Errorf("outbox row key %q: want <txn:016x>/<i:08x>", k)
	}
	if txn, err = strconv.ParseUint(t, 16, 64); err != nil {
		return 0, 0, fmt.Errorf("outbox row key %q: %w", k, err)
	}
	idx, err := strconv.ParseUint(n, 16, 32)
	return txn, int(idx), err
}

// output is one staged message for a partition channel.
type output struct {
	channel string
	msg     message.MutableMessage
}

// An outbox row's value is version 2, then one or more messages, each as
// uvarint-length fields channel, key, payload, then the number of
// properties and the properties as pairs. A transaction's messages fill
// rows of about outboxRowBytes (one RocksDB key per row, not per message:
// a key costs the memtable more than its bytes do). Version 1, a single
// message, is what earlier releases wrote; it still reads.
const (
	outboxRowV1    = 1
	outboxRowV2    = 2
	outboxRowBytes = 1 << 20
)

// appendOutput appends one message's fields to a version 2 row and
// returns the row and where the payload's bytes are in it.
func appendOutput(b []byte, channel string, msg *message.MutableMessage) (row []byte, payloadAt int) {
	b = binary.AppendUvarint(b, uint64(len(channel)))
	b = append(b, channel...)
	b = binary.AppendUvarint(b, uint64(len(msg.Key)))
	b = append(b, msg.Key...)
	b = binary.AppendUvarint(b, uint64(len(msg.Payload)))
	payloadAt = len(b)
	b = append(b, msg.Payload...)
	b = binary.AppendUvarint(b, uint64(len(msg.Properties)))
	for k, v := range msg.Properties {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b, payloadAt
}

var errBadOutput = errors.New("shard: bad outbox row")

// decodeRow returns the messages of an outbox row (either version). The
// payloads alias b, which the caller must not change afterwards.
func decodeRow(b []byte) ([]output, error) {
	if len(b) == 0 || (b[0] != outboxRowV1 && b[0] != outboxRowV2) {
		return nil, fmt.Errorf("%w: unknown version", errBadOutput)
	}
	v, rest := b[0], b[1:]
	var out []output
	for len(rest) > 0 || len(out) == 0 {
		o, r, err := decodeOutput(rest)
		if err != nil {
			return nil, fmt.Errorf("%w (message %d of the row)", err, len(out))
		}
		out, rest = append(out, o), r
		if v == outboxRowV1 && len(rest) != 0 {
			return nil, fmt.Errorf("%w: %d trailing bytes", errBadOutput, len(rest))
		}
	}
	return out, nil
}

// decodeOutput decodes the message at the start of b and returns the rest.
func decodeOutput(b []byte) (output, []byte, error) {
	bytesField := func() ([]byte, error) {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return nil, fmt.Errorf("%w: truncated", errBadOutput)
		}
		f := b[k : k+int(n) : k+int(n)]
		b = b[k+int(n):]
		return f, nil
	}
	field := func() (string, error) {
		f, err := bytesField()
		return string(f), err
	}
	var o output
	var err error
	if o.channel, err = field(); err != nil {
		return o, nil, err
	}
	if o.msg.Key, err = field(); err != nil {
		return o, nil, err
	}
	if o.msg.Payload, err = bytesField(); err != nil {
		return o, nil, err
	}
	np, k := binary.Uvarint(b)
	if k <= 0 {
		return o, nil, fmt.Errorf("%w: truncated", errBadOutput)
	}
	b = b[k:]
	if np > uint64(len(b)) {
		return o, nil, fmt.Errorf("%w: %d properties in %d bytes", errBadOutput, np, len(b))
	}
	if np > 0 {
		o.msg.Properties = make(map[string]string, np)
	}
	for range np {
		key, err := field()
		if err != nil {
			return o, nil, err
		}
		val, err := field()
		if err != nil {
			return o, nil, err
		}
		o.msg.Properties[key] = val
	}
	return o, b, nil
}

// outboxState is what the DB records of the outbox.
type outboxState struct {
	last, published uint64
	epoch           string      // the current epoch (outboxepoch.go)
	resetTerm       int64       // the LogResetTerm it was made under
	epochs          []epochFrom // every epoch but a first and only one, in txn order
}

func loadUint(db *grocksdb.DB, ro *grocksdb.ReadOptions, key []byte) (uint64, error) {
	v, err := db.GetBytes(ro, key)
	if err != nil || v == nil {
		return 0, err
	}
	n, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number: %w", key, v, err)
	}
	return n, nil
}

func loadOutboxState(db *grocksdb.DB, ro *grocksdb.ReadOptions) (outboxState, error) {
	var st outboxState
	var err error
	if st.last, err = loadUint(db, ro, outboxLastKey); err != nil {
		return st, fmt.Errorf("load outbox: %w", err)
	}
	if st.published, err = loadUint(db, ro, outboxPublishedKey); err != nil {
		return st, fmt.Errorf("load outbox: %w", err)
	}
	epoch, err := db.GetBytes(ro, outboxEpochKey)
	if err != nil {
		return st, fmt.Errorf("load outbox: %w", err)
	}
	st.epoch = string(epoch)
	if err := loadEpochs(db, ro, &st); err != nil {
		return st, fmt.Errorf("load outbox: %w", err)
	}
	return st, nil
}

func newEpoch() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// txnPublisher is the Publisher a primary hands to Consume and Flush: it
// stages outputs in the open transaction's batch.
type txnPublisher struct {
	sh     *primaryShard
	limits *outputLimits // refuses what an output can never take (nil: unchecked)
	topics *topicCache
	st     outboxState // last: the last txn that staged (committed or in flight)

	open   uint64 // the open transaction's txn number, 0 until it stages
	staged []output
	row    []byte // the open transaction's row being filled (version 2)
	rows   int    // its rows put in the batch so far
	rowCap int    // the size of the last full or sealed row: the next one's capacity

	channels map[topic.Partition]*outPart
	// check, when set, vets an output partition before the primary first
	// stages to it (drainer.prepare): a chain whose markers cover txns
	// beyond the shard's own fails the shard before it commits any.
	check func(ctx context.Context, channel, epoch string) (rec chanRecord, write bool, err error)
	err   error // a failed check: the transaction must not commit
}

// outPart is what the publisher keeps of an output partition: its channel
// name, formatted once, and whether it was vetted for the current epoch.
type outPart struct {
	channel string
	checked bool
}

// part is part's outPart (one map lookup per staged message).
func (p *txnPublisher) part(part topic.Partition) *outPart {
	op, ok := p.channels[part]
	if !ok {
		if p.channels == nil {
			p.channels = make(map[topic.Partition]*outPart)
		}
		op = &outPart{channel: part.Channel()}
		p.channels[part] = op
	}
	return op
}

var _ Publisher = (*txnPublisher)(nil)

func (p *txnPublisher) Publish(topicName string, msg message.MutableMessage) error {
	d, err := p.topics.get(p.sh.ctx, topicName)
	if err != nil {
		return fmt.Errorf("publish to topic %s: %w", topicName, err)
	}
	part := topic.Partition{Topic: topicName, Index: topic.PartitionFor(msg.Key, d.Partitions)}
	if err := p.checkLimits(part, &msg); err != nil {
		return err
	}
	return p.stage(d, part, msg)
}

func (p *txnPublisher) PublishTo(part topic.Partition, msg message.MutableMessage) error {
	d, err := p.topics.get(p.sh.ctx, part.Topic)
	if err != nil {
		return fmt.Errorf("publish to %s: %w", part, err)
	}
	if part.Index < 0 || part.Index >= d.Partitions {
		return fmt.Errorf("publish to %s: topic %s has partitions 0..%d", part, part.Topic, d.Partitions-1)
	}
	if err := p.checkLimits(part, &msg); err != nil {
		return err
	}
	return p.stage(d, part, msg)
}

func (p *txnPublisher) Partitions(topicName string) (int, error) {
	d, err := p.topics.get(p.sh.ctx, topicName)
	if err != nil {
		return 0, fmt.Errorf("partitions of topic %s: %w", topicName, err)
	}
	return d.Partitions, nil
}

func (p *txnPublisher) stage(_ topic.Description, part topic.Partition, msg message.MutableMessage) error {
	if p.err != nil {
		return p.err
	}
	if p.open == 0 {
		p.open = p.st.last + 1
		if rt := p.resetTerm(); p.st.needsEpoch(rt) {
			p.st.startEpoch(p.sh.txn, p.open, rt)
			for _, op := range p.channels {
				op.checked = false
			}
		}
	}
	op := p.part(part)
	ch := op.channel
	if p.check != nil && !op.checked {
		rec, write, err := p.check(p.sh.ctx, ch, p.st.epoch)
		if err != nil {
			p.err = fmt.Errorf("publish to %s: %w", part, err)
			return p.err
		}
		if write {
			putChanRecord(p.sh.txn, ch, rec)
		}
		op.checked = true
	}
	if p.row == nil {
		p.row = make([]byte, 1, max(p.rowCap, 4096))
		p.row[0] = outboxRowV2
	}
	o := output{channel: ch, msg: message.MutableMessage{Key: msg.Key}}
	var at int
	p.row, at = appendOutput(p.row, o.channel, &msg)
	// The payload is the row's copy: the row is only ever appended to (a
	// grown row is a new array), so these bytes stay as they are.
	o.msg.Payload = p.row[at : at+len(msg.Payload) : at+len(msg.Payload)]
	if len(msg.Properties) > 0 {
		o.msg.Properties = make(map[string]string, len(msg.Properties))
		for k, v := range msg.Properties {
			o.msg.Properties[k] = v
		}
	}
	p.staged = append(p.staged, o)
	if len(p.row) >= outboxRowBytes {
		p.putRow()
	}
	return nil
}

// putRow puts the row being filled in the open transaction's batch.
func (p *txnPublisher) putRow() {
	p.sh.txn.Put(outboxKey(p.open, p.rows), p.row)
	p.rows++
	p.rowCap, p.row = len(p.row), nil
}

// resetTerm is the spec's LogResetTerm (0 without a spec: tests).
func (p *txnPublisher) resetTerm() int64 {
	if p.sh.spec == nil {
		return 0
	}
	return p.sh.spec.LogResetTerm
}

// seal finishes the open transaction's outbox before its commit: it records
// the txn number in the batch (stage put a new epoch there) and returns the staged
// outputs (nil when none), ready for the drainer once the commit applied.
func (p *txnPublisher) seal(batch *grocksdb.WriteBatch) *outTxn {
	if p.open == 0 {
		return nil
	}
	if p.row != nil {
		p.putRow()
	}
	p.rows = 0
	batch.Put(outboxLastKey, strconv.AppendUint(nil, p.open, 10))
	t := &outTxn{txn: p.open, epoch: p.st.epoch, outputs: p.staged}
	// The next transaction likely stages as many: size its slice alike.
	p.st.last, p.open, p.staged = p.open, 0, make([]output, 0, len(p.staged))
	return t
}

// recordPublished adds to batch that every txn up to published is out, and
// deletes their rows.
func recordPublished(batch *grocksdb.WriteBatch, published uint64) {
	batch.Put(outboxPublishedKey, strconv.AppendUint(nil, published, 10))
	batch.DeleteRange(outboxPrefix, outboxTxnStart(published+1))
}

// topicCache looks topics up once per primary: a topic's partition count
// never changes.
type topicCache struct {
	lookup func(ctx context.Context, name string) (topic.Description, error)
	known  map[string]topic.Description
}

func (c *topicCache) get(ctx context.Context, name string) (topic.Description, error) {
	if d, ok := c.known[name]; ok {
		return d, nil
	}
	if c.lookup == nil {
		return topic.Description{}, errors.New("no topic lookup configured (shard.Config.Topics)")
	}
	d, err := c.lookup(ctx, name)
	if err != nil {
		return topic.Description{}, err
	}
	if c.known == nil {
		c.known = map[string]topic.Description{}
	}
	c.known[name] = d
	return d, nil
}
