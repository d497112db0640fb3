package writebatch_test

import (
	"bytes"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/writebatch"
)

// FuzzReader reads arbitrary bytes as a rep: the Reader must not panic,
// its records must lie inside the rep in order, and a rep it accepts whole
// must be one RocksDB accepts as well (given the column families it names
// exist and its ranges are not reversed, which RocksDB checks and the
// Reader does not).
func FuzzReader(f *testing.F) {
	wb := grocksdb.NewWriteBatch()
	wb.Put([]byte("a"), []byte("1"))
	wb.Delete([]byte("b"))
	wb.SingleDelete([]byte("c"))
	wb.DeleteRange([]byte("b"), []byte("d"))
	wb.Merge([]byte("m"), []byte("+1"))
	wb.PutLogData([]byte("note"))
	wb.Put(bytes.Repeat([]byte("k"), 200), bytes.Repeat([]byte("v"), 300))
	rep := bytes.Clone(wb.Data())
	wb.Destroy()
	f.Add(rep)
	f.Add(rep[:len(rep)-1])
	f.Add(rep[:writebatch.HeaderLen])
	f.Add([]byte{0: 0, 8: 1, 11: 0, 12: 0x05, 0x01, 0x01, 'a', 0x01, '1'})
	f.Add([]byte{0: 0, 8: 1, 11: 0, 12: 0x01, 0xff, 0xff, 0xff, 0xff, 0x1f})
	f.Add([]byte{0: 0, 8: 0, 11: 0, 12: 0x0d, 0x03, 0x00})
	r := openRocks(f)
	f.Fuzz(func(t *testing.T, rep []byte) {
		var rd writebatch.Reader
		rd.Reset(rep)
		last, writable := -1, true
		for rd.Next() {
			if off := rd.Offset(); off <= last || off < writebatch.HeaderLen || off >= len(rep) {
				t.Fatalf("record at byte %d after one at %d, in a %d-byte rep", off, last, len(rep))
			}
			last = rd.Offset()
			if rd.ColumnFamily() > 1 || (rd.Kind() == writebatch.DeleteRange && bytes.Compare(rd.Key(), rd.Value()) > 0) {
				writable = false
			}
		}
		if rd.Err() != nil || !writable {
			return
		}
		if err := r.write(rep); err != nil {
			t.Fatalf("the Reader accepts a rep RocksDB rejects (%v): %x", err, rep)
		}
	})
}
