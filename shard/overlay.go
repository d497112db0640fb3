package shard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMergePending is returned (wrapped) by Shard.Get for a key with a Merge
// operand in the open or an in-flight transaction: merge operands are applied
// by RocksDB only when the transaction reaches Database, so Get cannot
// compute the merged value. Read such keys after the commit, or keep them in
// the Cache.
var ErrMergePending = errors.New("shard: key has a pending merge operand")

// overlay is a decoded view of one transaction's write batch, so Get can
// read through writes not yet applied to the database. It parses the
// batch's serialized form (RocksDB's WriteBatch rep) incrementally: the rep
// only grows while the transaction is open.
type overlay struct {
	off     int // bytes of the rep already parsed (0: header not parsed)
	seq     int // operations parsed
	entries map[string]overlayEntry
	ranges  []overlayRange
	err     error
}

type overlayEntry struct {
	value   []byte
	deleted bool
	merge   bool
	seq     int
}

type overlayRange struct {
	begin, end string
	seq        int
}

// lookupResult says what an overlay knows of a key.
type lookupResult int

const (
	lookupMiss    lookupResult = iota // not written: read the layer below
	lookupValue                       // value written
	lookupDeleted                     // deleted
	lookupMerge                       // merge operand pending
)

func newOverlay() *overlay { return &overlay{entries: make(map[string]overlayEntry)} }

const batchHeaderLen = 12 // 8-byte sequence + 4-byte count

// update parses the records of rep that were appended since the last call.
// rep is the batch's current serialized form (WriteBatch.Data).
func (o *overlay) update(rep []byte) error {
	if o.err != nil {
		return o.err
	}
	if len(rep) < batchHeaderLen {
		return nil
	}
	if o.off == 0 {
		o.off = batchHeaderLen
	}
	if len(rep) < o.off {
		o.err = fmt.Errorf("write batch shrank from %d to %d bytes (cleared or rolled back?)", o.off, len(rep))
		return o.err
	}
	data := rep[o.off:]
	for len(data) > 0 {
		n, err := o.parseRecord(data)
		if err != nil {
			o.err = fmt.Errorf("write batch record at byte %d: %w", o.off, err)
			return o.err
		}
		data = data[n:]
		o.off += n
	}
	return nil
}

// parseRecord applies the first record of data and returns its length.
func (o *overlay) parseRecord(data []byte) (int, error) {
	tag := data[0]
	p := 1
	uvarint := func() (uint64, error) {
		v, n := binary.Uvarint(data[p:])
		if n <= 0 {
			return 0, errors.New("bad varint")
		}
		p += n
		return v, nil
	}
	slice := func() ([]byte, error) {
		l, err := uvarint()
		if err != nil {
			return nil, err
		}
		if uint64(len(data)-p) < l {
			return nil, errors.New("short record")
		}
		b := data[p : p+int(l)]
		p += int(l)
		return b, nil
	}
	cf := func() error {
		id, err := uvarint()
		if err != nil {
			return err
		}
		if id != 0 {
			return fmt.Errorf("column family %d: only the default column family is supported", id)
		}
		return nil
	}
	var key, val []byte
	var err error
	switch tag {
	case 0x0, 0x7, 0x4, 0x8: // deletion, single deletion (+CF)
		if tag == 0x4 || tag == 0x8 {
			if err = cf(); err != nil {
				return 0, err
			}
		}
		if key, err = slice(); err != nil {
			return 0, err
		}
		o.seq++
		if !ownKey(key) {
			o.entries[string(key)] = overlayEntry{deleted: true, seq: o.seq}
		}
	case 0x1, 0x5, 0x2, 0x6: // value, merge (+CF)
		if tag == 0x5 || tag == 0x6 {
			if err = cf(); err != nil {
				return 0, err
			}
		}
		if key, err = slice(); err != nil {
			return 0, err
		}
		if val, err = slice(); err != nil {
			return 0, err
		}
		o.seq++
		switch {
		case ownKey(key):
		case tag == 0x1 || tag == 0x5:
			o.entries[string(key)] = overlayEntry{value: append([]byte(nil), val...), seq: o.seq}
		default:
			o.entries[string(key)] = overlayEntry{merge: true, seq: o.seq}
		}
	case 0xF, 0xE: // range deletion (+CF)
		if tag == 0xE {
			if err = cf(); err != nil {
				return 0, err
			}
		}
		if key, err = slice(); err != nil {
			return 0, err
		}
		if val, err = slice(); err != nil {
			return 0, err
		}
		o.seq++
		if !ownKey(key) || !ownKey(val) { // else it covers only consumerd's own keys
			o.ranges = append(o.ranges, overlayRange{begin: string(key), end: string(val), seq: o.seq})
		}
	case 0x3: // log data: not a write
		if _, err = slice(); err != nil {
			return 0, err
		}
	case 0xD: // noop
	default:
		return 0, fmt.Errorf("unsupported record type 0x%x", tag)
	}
	return p, nil
}

// ownPrefix begins consumerd's own keys in a shard database (offsets, the
// recovery-log position, the outbox). The overlay leaves them out: only
// the framework writes them and it never reads them through Get, and the
// outbox rows (a copy of every output) would double its work.
const ownPrefix = "\x00consumerd/"

func ownKey(k []byte) bool { return bytes.HasPrefix(k, []byte(ownPrefix)) }

// lookup reports what the overlay holds for key.
func (o *overlay) lookup(key []byte) (lookupResult, []byte) {
	e, ok := o.entries[string(key)]
	rangeSeq := 0
	for _, r := range o.ranges {
		if string(key) >= r.begin && string(key) < r.end && r.seq > rangeSeq {
			rangeSeq = r.seq
		}
	}
	switch {
	case ok && e.seq > rangeSeq:
		switch {
		case e.merge:
			return lookupMerge, nil
		case e.deleted:
			return lookupDeleted, nil
		default:
			return lookupValue, e.value
		}
	case rangeSeq > 0:
		return lookupDeleted, nil
	default:
		return lookupMiss, nil
	}
}
