package windows

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/rockstest"
	"github.com/consumerd/consumerd/topic"
)

// testDB is a real RocksDB in a temp dir, closed at the test's cleanup.
type testDB struct {
	db *grocksdb.DB
	ro *grocksdb.ReadOptions
	wo *grocksdb.WriteOptions
}

func openDB(t testing.TB) *testDB {
	t.Helper()
	d := &testDB{db: rockstest.Open(t), ro: grocksdb.NewDefaultReadOptions(), wo: grocksdb.NewDefaultWriteOptions()}
	t.Cleanup(func() {
		d.ro.Destroy()
		d.wo.Destroy()
	})
	return d
}

// commit writes wb to the database, as the shard does once the recovery
// log acknowledged it, and clears it for the next transaction.
func (d *testDB) commit(t testing.TB, wb *grocksdb.WriteBatch) {
	t.Helper()
	if err := d.db.Write(d.wo, wb); err != nil {
		t.Fatalf("write batch: %v", err)
	}
	wb.Clear()
}

// records describes wb's records, one a line, keys formatted by key.
func records(t testing.TB, wb *grocksdb.WriteBatch, key func([]byte) string) string {
	t.Helper()
	var b strings.Builder
	it := wb.NewIterator()
	for it.Next() {
		r := it.Record()
		switch r.Type {
		case grocksdb.WriteBatchValueRecord:
			fmt.Fprintf(&b, "put %s = %q\n", key(r.Key), r.Value)
		case grocksdb.WriteBatchDeletionRecord:
			fmt.Fprintf(&b, "delete %s\n", key(r.Key))
		default:
			t.Fatalf("unexpected batch record type %d", r.Type)
		}
	}
	if err := it.Error(); err != nil {
		t.Fatalf("iterate batch: %v", err)
	}
	if b.Len() == 0 {
		return "(no writes)\n"
	}
	return b.String()
}

// fmtTime shows MinTime and MaxTime by name.
func fmtTime(ts int64) string {
	switch ts {
	case MinTime:
		return "min"
	case MaxTime:
		return "max"
	}
	return strconv.FormatInt(ts, 10)
}

// parseTime reads a time, "min" and "max" included.
func parseTime(s string) (int64, error) {
	switch s {
	case "min":
		return MinTime, nil
	case "max":
		return MaxTime, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// parsePart reads a partition as its channel name, e.g. "words/0003".
func parsePart(s string) (topic.Partition, error) {
	name, idx, err := topic.ParseChannelName(s)
	return topic.Partition{Topic: name, Index: idx}, err
}
