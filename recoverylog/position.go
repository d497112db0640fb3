package recoverylog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/wal/message"
)

// Channel is the WAL channel holding a shard's recovery log.
func Channel(shardID string) string { return "recovery/" + shardID }

// Position is the chain state after the last applied record: its Seq, the
// chain checksum after it, the log id it was read at, and the highest fence
// term applied so far. The zero Position is the state of an empty DB before
// the first record of a log.
type Position struct {
	Seq      uint64
	Checksum uint32
	LogID    message.MessageID
	Term     uint64
}

// String renders the position for logs and errors.
func (p Position) String() string {
	return fmt.Sprintf("seq=%d checksum=%08x log_id=%d term=%d", p.Seq, p.Checksum, p.LogID, p.Term)
}

// PositionKey is where the applied Position lives in the shard DB. It is
// written in the same WriteBatch as the record it follows, so state and
// position change atomically.
var PositionKey = []byte("\x00consumerd/recoverylog")

// offsetPrefix prefixes every source offset key.
var offsetPrefix = []byte("\x00consumerd/offset/")

// offsetEnd is the first key after every offset key: LoadOffsets' upper
// bound. Without it, the iterator's step past the last offset walks every
// deleted key that sorts next (a shard's published outbox rows, removed by
// range deletions until compaction drops them).
var offsetEnd = append(bytes.Clone(offsetPrefix[:len(offsetPrefix)-1]), '/'+1)

const positionVersion byte = 1
const positionLen = 1 + 8 + 4 + 8 + 8

// ErrBadPosition is wrapped when a stored position or offset cannot be decoded.
var ErrBadPosition = errors.New("recoverylog: bad stored position")

// EncodePosition encodes p for PositionKey:
// version u8 | seq u64 | checksum u32 | logID u64 | term u64 (big-endian).
func EncodePosition(p Position) []byte {
	b := make([]byte, 0, positionLen)
	b = append(b, positionVersion)
	b = binary.BigEndian.AppendUint64(b, p.Seq)
	b = binary.BigEndian.AppendUint32(b, p.Checksum)
	b = binary.BigEndian.AppendUint64(b, uint64(p.LogID))
	b = binary.BigEndian.AppendUint64(b, p.Term)
	return b
}

// DecodePosition parses EncodePosition's output.
func DecodePosition(b []byte) (Position, error) {
	if len(b) != positionLen {
		return Position{}, fmt.Errorf("%w: %d bytes, want %d", ErrBadPosition, len(b), positionLen)
	}
	if b[0] != positionVersion {
		return Position{}, fmt.Errorf("%w: unknown version %d", ErrBadPosition, b[0])
	}
	return Position{
		Seq:      binary.BigEndian.Uint64(b[1:9]),
		Checksum: binary.BigEndian.Uint32(b[9:13]),
		LogID:    message.MessageID(binary.BigEndian.Uint64(b[13:21])),
		Term:     binary.BigEndian.Uint64(b[21:29]),
	}, nil
}

// LoadPosition reads the applied Position from db; an empty DB (no key)
// gives the zero Position.
func LoadPosition(db *grocksdb.DB) (Position, error) {
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	v, err := db.GetBytes(ro, PositionKey)
	if err != nil {
		return Position{}, fmt.Errorf("recoverylog: read position: %w", err)
	}
	if v == nil {
		return Position{}, nil
	}
	p, err := DecodePosition(v)
	if err != nil {
		return Position{}, fmt.Errorf("recoverylog: load position: %w", err)
	}
	return p, nil
}

// OffsetKey is the DB key holding the read offset of a source channel:
// "\x00consumerd/offset/<channel>".
func OffsetKey(channel string) []byte {
	k := make([]byte, 0, len(offsetPrefix)+len(channel))
	k = append(k, offsetPrefix...)
	return append(k, channel...)
}

// SourceOffset is what a shard records of a source channel with every
// transaction that read from it: how far it read, in which life of the
// channel, and which operator's reset of the source it applied. A new
// primary checks them against the channel (wal.Bounds) before it reads on.
type SourceOffset struct {
	// ID is the id of the last message consumed (0: none).
	ID message.MessageID
	// Incarnation is the life of the channel ID belongs to
	// (wal.Bounds.Incarnation; "": not recorded, as by versions before it
	// was).
	Incarnation string
	// ResetTerm is the term of the last source reset the shard applied
	// (the spec's source_resets; 0: none), so a reset applies once.
	ResetTerm uint64
}

// offsetVersion1 starts an offset value of the current format; a value of
// exactly 8 bytes is the first format: the id alone.
const offsetVersion1 byte = 1

// offsetLen1 is the fixed part of a version 1 value: version, id, reset
// term; the incarnation follows.
const offsetLen1 = 1 + 8 + 8

// EncodeOffset encodes a source offset as the value of OffsetKey:
// version u8 (1) | id u64 | reset term u64 | incarnation (the rest),
// big-endian.
func EncodeOffset(o SourceOffset) []byte {
	b := make([]byte, 0, offsetLen1+len(o.Incarnation))
	b = append(b, offsetVersion1)
	b = binary.BigEndian.AppendUint64(b, uint64(o.ID))
	b = binary.BigEndian.AppendUint64(b, o.ResetTerm)
	return append(b, o.Incarnation...)
}

// DecodeOffset parses EncodeOffset's output, and the first format (the id
// alone, 8 bytes big-endian: no incarnation recorded), which the next
// commit that reads the source rewrites in the current one.
func DecodeOffset(b []byte) (SourceOffset, error) {
	switch {
	case len(b) == 8:
		return SourceOffset{ID: message.MessageID(binary.BigEndian.Uint64(b))}, nil
	case len(b) < offsetLen1:
		return SourceOffset{}, fmt.Errorf("%w: offset value of %d bytes", ErrBadPosition, len(b))
	case b[0] != offsetVersion1:
		return SourceOffset{}, fmt.Errorf("%w: offset value of unknown version %d", ErrBadPosition, b[0])
	}
	return SourceOffset{
		ID:          message.MessageID(binary.BigEndian.Uint64(b[1:9])),
		ResetTerm:   binary.BigEndian.Uint64(b[9:17]),
		Incarnation: string(b[17:]),
	}, nil
}

// LoadOffset reads the committed offset of one source channel from db, with
// a point lookup: what a reader polling a shard's progress wants (the
// latency bench does, every millisecond). LoadOffsets builds an iterator
// and seeks, too costly to poll that way. ok is false
// when the channel has no offset yet.
func LoadOffset(db *grocksdb.DB, channel string) (o SourceOffset, ok bool, err error) {
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	v, err := db.GetBytes(ro, OffsetKey(channel))
	if err != nil {
		return SourceOffset{}, false, fmt.Errorf("recoverylog: read offset of channel %q: %w", channel, err)
	}
	if v == nil {
		return SourceOffset{}, false, nil
	}
	if o, err = DecodeOffset(v); err != nil {
		return SourceOffset{}, false, fmt.Errorf("recoverylog: offset of channel %q: %w", channel, err)
	}
	return o, true, nil
}

// PutOffset adds the source offset of channel to batch (the shard's
// transaction batch), so it commits atomically with the state it produced.
func PutOffset(batch *grocksdb.WriteBatch, channel string, o SourceOffset) {
	batch.Put(OffsetKey(channel), EncodeOffset(o))
}

// LoadOffsets reads every source offset stored in db, by channel.
func LoadOffsets(db *grocksdb.DB) (map[string]SourceOffset, error) {
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	ro.SetIterateUpperBound(offsetEnd)
	it := db.NewIterator(ro)
	defer it.Close()
	out := map[string]SourceOffset{}
	for it.Seek(offsetPrefix); it.ValidForPrefix(offsetPrefix); it.Next() {
		k, v := it.Key(), it.Value()
		ch := string(bytes.TrimPrefix(k.Data(), offsetPrefix))
		o, err := DecodeOffset(v.Data())
		k.Free()
		v.Free()
		if err != nil {
			return nil, fmt.Errorf("recoverylog: offset of channel %q: %w", ch, err)
		}
		out[ch] = o
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("recoverylog: iterate offsets: %w", err)
	}
	return out, nil
}
