package writebatch_test

import (
	"fmt"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/writebatch"
)

// BenchmarkReader reads a transaction-sized batch: puts of short keys and
// 100-byte values with a delete every tenth.
func BenchmarkReader(b *testing.B) {
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	val := make([]byte, 100)
	for i := range 1000 {
		wb.Put(fmt.Appendf(nil, "key-%08d", i), val)
		if i%10 == 0 {
			wb.Delete(fmt.Appendf(nil, "gone-%08d", i))
		}
	}
	rep := wb.Data()
	b.SetBytes(int64(len(rep)))
	b.ReportAllocs()
	for b.Loop() {
		var r writebatch.Reader
		r.Reset(rep)
		for r.Next() {
		}
		if err := r.Err(); err != nil {
			b.Fatal(err)
		}
	}
}
