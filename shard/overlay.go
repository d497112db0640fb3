package shard

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/consumerd/consumerd/internal/writebatch"
)

// ErrMergePending is returned (wrapped) by Shard.Get for a key with a Merge
// operand in the open or an in-flight transaction: merge operands are applied
// by RocksDB only when the transaction reaches Database, so Get cannot
// compute the merged value. Read such keys after the commit, or keep them in
// the Cache.
var ErrMergePending = errors.New("shard: key has a pending merge operand")

// overlay is a decoded view of one transaction's write batch, so Get can
// read through writes not yet applied to the database. It reads the batch's
// serialized form (RocksDB's WriteBatch rep, package writebatch)
// incrementally: the rep only grows while the transaction is open.
type overlay struct {
	batch   writebatch.Reader
	seq     int // writes read
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

// update reads the records of rep that were appended since the last call.
// rep is the batch's current serialized form (WriteBatch.Data). The first
// error sticks.
func (o *overlay) update(rep []byte) error {
	if o.err != nil {
		return o.err
	}
	if err := o.batch.Extend(rep); err != nil {
		o.err = err
		return o.err
	}
	for o.batch.Next() {
		if cf := o.batch.ColumnFamily(); cf != 0 {
			o.err = fmt.Errorf("write batch record at byte %d: column family %d: only the default column family is supported",
				o.batch.Offset(), cf)
			return o.err
		}
		o.apply(o.batch.Kind(), o.batch.Key(), o.batch.Value())
	}
	if err := o.batch.Err(); err != nil {
		o.err = err
		return o.err
	}
	return nil
}

// apply records one record of the batch (see writebatch.Kind for what key
// and value hold); consumerd's own keys are left out (ownPrefix).
func (o *overlay) apply(kind writebatch.Kind, key, value []byte) {
	switch kind {
	case writebatch.LogData, writebatch.Noop: // not writes
		return
	}
	o.seq++
	switch kind {
	case writebatch.Put:
		if !ownKey(key) {
			o.entries[string(key)] = overlayEntry{value: append([]byte(nil), value...), seq: o.seq}
		}
	case writebatch.Merge:
		if !ownKey(key) {
			o.entries[string(key)] = overlayEntry{merge: true, seq: o.seq}
		}
	case writebatch.Delete, writebatch.SingleDelete:
		if !ownKey(key) {
			o.entries[string(key)] = overlayEntry{deleted: true, seq: o.seq}
		}
	case writebatch.DeleteRange:
		if !ownKey(key) || !ownKey(value) { // else it covers only consumerd's own keys
			o.ranges = append(o.ranges, overlayRange{begin: string(key), end: string(value), seq: o.seq})
		}
	}
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
