package recoverylog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/rockstest"
	"github.com/consumerd/consumerd/wal/message"
)

// Reading the offsets does not walk the deleted keys that sort after them
// (a shard's published outbox rows, "\x00consumerd/outbox/…", removed by
// range deletions): the latency bench reads the offsets every millisecond,
// and without an upper bound each read stepped through every published
// output since the last flush, which dominated the process's CPU.
func TestLoadOffsetsSkipsNothingAfterThem(t *testing.T) {
	db := rockstest.Open(t)
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	b := grocksdb.NewWriteBatch()
	defer b.Destroy()
	PutOffset(b, "events/0000", SourceOffset{ID: 41})
	PutOffset(b, "events/0001", SourceOffset{ID: 42})
	const deleted = 20_000
	for i := 0; i < deleted; i++ {
		b.Put([]byte(fmt.Sprintf("\x00consumerd/outbox/%016x", i)), []byte("row"))
	}
	b.DeleteRange([]byte("\x00consumerd/outbox/"), []byte("\x00consumerd/outbox/\xff"))
	b.Put([]byte("u/live"), []byte("state"))
	if err := db.Write(wo, b); err != nil {
		t.Fatal(err)
	}

	loadCounted(t, db, deleted) // the rows in the memtable
	fo := grocksdb.NewDefaultFlushOptions()
	defer fo.Destroy()
	if err := db.Flush(fo); err != nil {
		t.Fatal(err)
	}
	loadCounted(t, db, deleted) // and in a table file
}

// loadCounted checks LoadOffsets' result on db and that it compared few
// keys (rocksdb_user_key_comparison_count, counted by RocksDB's perf
// context: a walk over the deleted rows compares each, 60,000 for 20,000).
func loadCounted(t *testing.T, db *grocksdb.DB, deleted int) {
	t.Helper()
	var offs map[string]SourceOffset
	var err error
	pc := rockstest.CountPerf(func() { offs, err = LoadOffsets(db) })
	defer pc.Destroy()
	if err != nil {
		t.Fatal(err)
	}
	if len(offs) != 2 || offs["events/0000"].ID != message.MessageID(41) || offs["events/0001"].ID != message.MessageID(42) {
		t.Fatalf("offsets %v, want events/0000=41 events/0001=42", offs)
	}
	if n := pc.Metric(rockstest.PerfUserKeyComparisons); n > 100 {
		t.Fatalf("LoadOffsets compared %d keys for 2 offsets (%d deleted rows sort after them): it walks past its prefix\n%s", n, deleted, pc.Report(true))
	}
}

// LoadOffset reads one channel's offset: absent, present, damaged.
func TestLoadOffset(t *testing.T) {
	db := rockstest.Open(t)
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	if _, ok, err := LoadOffset(db, "events/0000"); ok || err != nil {
		t.Fatalf("empty db: ok %v, err %v; want no offset", ok, err)
	}
	b := grocksdb.NewWriteBatch()
	defer b.Destroy()
	PutOffset(b, "events/0000", SourceOffset{ID: 7, Incarnation: "i1"})
	b.Put(OffsetKey("events/0001"), []byte("bad"))
	if err := db.Write(wo, b); err != nil {
		t.Fatal(err)
	}
	if o, ok, err := LoadOffset(db, "events/0000"); !ok || err != nil || o != (SourceOffset{ID: 7, Incarnation: "i1"}) {
		t.Fatalf("LoadOffset = %+v, %v, %v; want 7 of incarnation i1", o, ok, err)
	}
	if _, _, err := LoadOffset(db, "events/0001"); err == nil || !strings.Contains(err.Error(), "events/0001") {
		t.Fatalf("damaged offset: err %v, want one naming the channel", err)
	}
}

// Offset values: the current format round-trips every field; the first
// format (8 bytes, the id alone) still reads, with no incarnation; anything
// else is ErrBadPosition.
func TestOffsetFormats(t *testing.T) {
	for _, o := range []SourceOffset{
		{}, {ID: 7}, {ID: 1<<63 + 5, Incarnation: "2026-01-02T03:04:05.123456789Z", ResetTerm: 42},
	} {
		if got, err := DecodeOffset(EncodeOffset(o)); err != nil || got != o {
			t.Errorf("round trip of %+v: %+v, %v", o, got, err)
		}
	}
	first := binary.BigEndian.AppendUint64(nil, 123456)
	if got, err := DecodeOffset(first); err != nil || got != (SourceOffset{ID: 123456}) {
		t.Errorf("first format: %+v, %v; want id 123456, no incarnation", got, err)
	}
	v2 := EncodeOffset(SourceOffset{ID: 1})
	v2[0] = 2
	for name, b := range map[string][]byte{"short": []byte("abc"), "9 bytes": make([]byte, 9), "version 2": v2} {
		if _, err := DecodeOffset(b); !errors.Is(err, ErrBadPosition) {
			t.Errorf("%s: %v, want ErrBadPosition", name, err)
		}
	}
}
