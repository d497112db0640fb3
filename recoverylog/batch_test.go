package recoverylog

import (
	"bytes"
	"slices"
	"testing"

	"github.com/linxGnu/grocksdb"
)

// appendBatchPut must produce exactly the rep RocksDB's own Put makes, with
// the array reused when it has the room and copied when it has not.
func TestAppendBatchPutMatchesRocksDB(t *testing.T) {
	for _, tc := range []struct {
		name string
		puts [][2]string
	}{
		{"empty batch", nil},
		{"small", [][2]string{{"a", "1"}, {"b", ""}}},
		{"long key and value", [][2]string{{string(bytes.Repeat([]byte("k"), 300)), string(bytes.Repeat([]byte("v"), 70000))}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wb, want := grocksdb.NewWriteBatch(), grocksdb.NewWriteBatch()
			defer wb.Destroy()
			defer want.Destroy()
			for _, p := range tc.puts {
				wb.Put([]byte(p[0]), []byte(p[1]))
				want.Put([]byte(p[0]), []byte(p[1]))
				wb.Delete([]byte(p[0] + "-gone"))
				want.Delete([]byte(p[0] + "-gone"))
			}
			pos := EncodePosition(Position{Seq: 7, Checksum: 9, LogID: 300, Term: 2})
			want.Put(PositionKey, pos)

			roomy := append(make([]byte, 0, len(wb.Data())+txnTailRoom), wb.Data()...)
			got, err := appendBatchPut(roomy, PositionKey, pos)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Data()) {
				t.Fatalf("rep differs from RocksDB's:\n got %q\nwant %q", got, want.Data())
			}
			if &got[0] != &roomy[:1][0] {
				t.Fatal("a batch with txnTailRoom to spare was copied")
			}
			tight := slices.Clip(slices.Clone(wb.Data()))
			before := slices.Clone(tight)
			got, err = appendBatchPut(tight, PositionKey, pos)
			if err != nil || !bytes.Equal(got, want.Data()) {
				t.Fatalf("without room: %v, rep %q", err, got)
			}
			if !bytes.Equal(tight, before) {
				t.Fatal("a clipped batch was written in place")
			}
			n := grocksdb.WriteBatchFrom(got)
			defer n.Destroy()
			if n.Count() != want.Count() {
				t.Fatalf("count %d, want %d", n.Count(), want.Count())
			}
		})
	}
	if _, err := appendBatchPut(make([]byte, 5), PositionKey, nil); err == nil {
		t.Fatal("a 5-byte batch was accepted")
	}
}
