package windows

import (
	"bytes"
	"container/heap"
	"encoding/binary"
	"fmt"

	"github.com/linxGnu/grocksdb"
)

// Timers are event-time timers kept in the shard's RocksDB, each an
// (at, key) pair, with an in-memory ordered index of them.
//
// The index exists because Shard.Database does not yet hold transactions
// whose commit is in flight: finding due timers by iterating the Database
// would re-fire timers that the previous, still committing, transaction
// already fired (and deleted). So the index is loaded once, when the shard
// becomes primary and the Database holds everything committed, and then
// kept in step with every Set and Delete written to the open transaction.
// After Due returned an error (which fails the shard, discarding its
// transaction) the index is ahead of the database: only Load repairs it.
//
// Key layout: prefix + 8-byte big-endian at, sign bit flipped (so that
// negative times sort before positive ones, as RocksDB compares bytes) +
// key; the value is empty. The index orders timers as the keys do.
type Timers struct {
	prefix []byte
	index  map[timerID]*timer
	heap   timerHeap
	buf    []byte // scratch for encoded keys (the batch copies them)
}

// timerID identifies a timer.
type timerID struct {
	at  int64
	key string
}

// timer is an indexed timer and its position in the heap.
type timer struct {
	timerID
	pos int
}

// NewTimers returns an empty Timers whose keys live under prefix. Call Load
// before use. prefix must be non-empty and own its key range (Load reads
// every key under it as a timer); it panics on an empty one.
func NewTimers(prefix []byte) *Timers {
	if len(prefix) == 0 {
		panic("windows.NewTimers: empty prefix (the timers would read the whole database as theirs)")
	}
	return &Timers{prefix: bytes.Clone(prefix), index: map[timerID]*timer{}}
}

// Load rebuilds the index from the timers under the prefix in db. Call it
// from ShardIniter.InitShard with s.Database() and s.ReadOptions(), when
// the Database holds every committed transaction. A key too short to hold
// a time is an error naming it (hex).
func (t *Timers) Load(db *grocksdb.DB, ro *grocksdb.ReadOptions) error {
	t.index = map[timerID]*timer{}
	t.heap = t.heap[:0]
	it := db.NewIterator(ro)
	defer it.Close()
	for it.Seek(t.prefix); it.ValidForPrefix(t.prefix); it.Next() {
		k := it.Key()
		raw := k.Data()
		if len(raw) < len(t.prefix)+8 {
			err := fmt.Errorf("windows: load timers: key %x: shorter than its prefix %x and an 8-byte time", raw, t.prefix)
			k.Free()
			return err
		}
		id := timerID{
			at:  int64(binary.BigEndian.Uint64(raw[len(t.prefix):]) ^ signBit),
			key: string(raw[len(t.prefix)+8:]), // copies: raw is freed below
		}
		k.Free()
		tm := &timer{timerID: id, pos: len(t.heap)}
		t.index[id] = tm
		t.heap = append(t.heap, tm)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("windows: load timers under prefix %x: %w", t.prefix, err)
	}
	heap.Init(&t.heap) // keys came in order, so this moves nothing
	return nil
}

// signBit flips int64 order into byte order.
const signBit = 1 << 63

// encode is the database key of timer (at, key), in t.buf.
func (t *Timers) encode(at int64, key []byte) []byte {
	t.buf = append(t.buf[:0], t.prefix...)
	t.buf = binary.BigEndian.AppendUint64(t.buf, uint64(at)^signBit)
	t.buf = append(t.buf, key...)
	return t.buf
}

// Set adds timer (at, key), writing it to txn. Setting a timer that exists
// writes nothing, so an app may Set a window's timer on each of its events.
// key is copied.
func (t *Timers) Set(txn *grocksdb.WriteBatch, at int64, key []byte) {
	id := timerID{at: at, key: string(key)}
	if _, ok := t.index[id]; ok {
		return
	}
	tm := &timer{timerID: id}
	t.index[id] = tm
	heap.Push(&t.heap, tm)
	txn.Put(t.encode(at, key), nil)
}

// Delete removes timer (at, key), writing the delete to txn. Deleting a
// timer that does not exist writes nothing: the index holds every timer
// the database and the open transaction hold.
func (t *Timers) Delete(txn *grocksdb.WriteBatch, at int64, key []byte) {
	id := timerID{at: at, key: string(key)}
	tm, ok := t.index[id]
	if !ok {
		return
	}
	heap.Remove(&t.heap, tm.pos)
	delete(t.index, id)
	txn.Delete(t.encode(at, key))
}

// Due fires every timer with at <= watermark in ascending (at, key) order:
// it deletes the timer (from the index and in txn), then calls fn with it;
// key is fn's to keep. fn may Set and Delete timers: one it sets with
// at <= watermark fires in this same call, in its place in the order (so a
// timer that fn re-sets at its own time fires again, forever). Due stops at
// fn's first error and returns it, wrapped with the timer.
//
// Call it from Consumer.Flush, after every message of the transaction was
// applied, with the Tracker's Current.
func (t *Timers) Due(txn *grocksdb.WriteBatch, watermark int64, fn func(at int64, key []byte) error) error {
	for len(t.heap) > 0 && t.heap[0].at <= watermark {
		tm := heap.Pop(&t.heap).(*timer)
		delete(t.index, tm.timerID)
		key := []byte(tm.key)
		txn.Delete(t.encode(tm.at, key))
		if err := fn(tm.at, key); err != nil {
			return fmt.Errorf("windows: timer at %d, key %q: %w", tm.at, tm.key, err)
		}
	}
	return nil
}

// Len is the number of timers.
func (t *Timers) Len() int { return len(t.heap) }

// Next is the earliest timer's time, ok false when there is none.
func (t *Timers) Next() (at int64, ok bool) {
	if len(t.heap) == 0 {
		return 0, false
	}
	return t.heap[0].at, true
}

// timerHeap is a min-heap of timers by (at, key) that keeps each timer's
// position, so that Delete removes it in O(log n) instead of leaving it to
// be skipped later.
type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }

func (h timerHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].key < h[j].key
}

func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}

func (h *timerHeap) Push(x any) {
	tm := x.(*timer)
	tm.pos = len(*h)
	*h = append(*h, tm)
}

func (h *timerHeap) Pop() any {
	old := *h
	tm := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return tm
}
