package writebatch_test

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/writebatch"
)

// concatOperator merges by concatenating the operands onto the value, so a
// model of a batch's effect can follow RocksDB's merges.
type concatOperator struct{}

func (concatOperator) Name() string { return "consumerd.test.concat" }

func (concatOperator) FullMerge(_, existing []byte, operands [][]byte) ([]byte, bool) {
	return bytes.Join(append([][]byte{existing}, operands...), nil), true
}

// rocks is a fresh RocksDB with the concat merge operator and a second
// column family, "one" (id 1).
type rocks struct {
	db  *grocksdb.DB
	one *grocksdb.ColumnFamilyHandle
	wo  *grocksdb.WriteOptions
}

func openRocks(t testing.TB) *rocks {
	t.Helper()
	// The options are left to the process: grocksdb v1.7.15 frees a merge
	// operator twice when options holding one are destroyed (see
	// shard.destroyOptions).
	opts := grocksdb.NewDefaultOptions()
	opts.SetCreateIfMissing(true)
	opts.SetMergeOperator(concatOperator{})
	db, err := grocksdb.OpenDb(opts, t.TempDir())
	if err != nil {
		t.Fatalf("open rocksdb: %v", err)
	}
	one, err := db.CreateColumnFamily(opts, "one")
	if err != nil {
		db.Close()
		t.Fatalf("create column family: %v", err)
	}
	r := &rocks{db: db, one: one, wo: grocksdb.NewDefaultWriteOptions()}
	t.Cleanup(func() {
		r.wo.Destroy()
		r.one.Destroy()
		r.db.Close()
	})
	return r
}

// write writes rep to the database as RocksDB's WriteBatchFrom reads it.
func (r *rocks) write(rep []byte) error {
	wb := grocksdb.WriteBatchFrom(rep)
	defer wb.Destroy()
	return r.db.Write(r.wo, wb)
}

// contents is every key/value of the database: column family id → key →
// value.
func (r *rocks) contents(t testing.TB) map[uint32]map[string]string {
	t.Helper()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	out := map[uint32]map[string]string{}
	for id, it := range []*grocksdb.Iterator{r.db.NewIterator(ro), r.db.NewIteratorCF(ro, r.one)} {
		kv := map[string]string{}
		for it.SeekToFirst(); it.Valid(); it.Next() {
			k, v := it.Key(), it.Value()
			kv[string(k.Data())] = string(v.Data())
			k.Free()
			v.Free()
		}
		if err := it.Err(); err != nil {
			t.Fatalf("iterate column family %d: %v", id, err)
		}
		it.Close()
		out[uint32(id)] = kv
	}
	return out
}

// op is one line of a build case: an operation, its arguments and the
// column family it names ("@one": id 1, else the default one).
type op struct {
	name string
	args [][]byte
	cf   bool
}

// parseOp reads "name arg... [@one]". An argument is a word, a Go-quoted
// string, or "x*300" for 300 x's.
func parseOp(t testing.TB, line string) op {
	t.Helper()
	fields := strings.Fields(line)
	o := op{name: fields[0]}
	for _, f := range fields[1:] {
		switch {
		case f == "@one":
			o.cf = true
		case strings.HasPrefix(f, `"`):
			s, err := strconv.Unquote(f)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			o.args = append(o.args, []byte(s))
		case strings.Contains(f, "*"):
			s, n, _ := strings.Cut(f, "*")
			count, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			o.args = append(o.args, bytes.Repeat([]byte(s), count))
		default:
			o.args = append(o.args, []byte(f))
		}
	}
	want := map[string]int{"put": 2, "merge": 2, "delete-range": 2, "append-put": 2, "delete": 1, "single-delete": 1, "log-data": 1}
	if n, ok := want[o.name]; !ok || n != len(o.args) {
		t.Fatalf("%s: want an operation and its %d arguments", line, n)
	}
	return o
}

// apply performs o on wb through grocksdb.
func (r *rocks) apply(wb *grocksdb.WriteBatch, o op) {
	a := o.args
	if o.cf {
		switch o.name {
		case "put":
			wb.PutCF(r.one, a[0], a[1])
		case "merge":
			wb.MergeCF(r.one, a[0], a[1])
		case "delete":
			wb.DeleteCF(r.one, a[0])
		case "single-delete":
			wb.SingleDeleteCF(r.one, a[0])
		case "delete-range":
			wb.DeleteRangeCF(r.one, a[0], a[1])
		default:
			panic(fmt.Sprintf("%s has no column family variant", o.name))
		}
		return
	}
	switch o.name {
	case "put", "append-put":
		wb.Put(a[0], a[1])
	case "merge":
		wb.Merge(a[0], a[1])
	case "delete":
		wb.Delete(a[0])
	case "single-delete":
		wb.SingleDelete(a[0])
	case "delete-range":
		wb.DeleteRange(a[0], a[1])
	case "log-data":
		wb.PutLogData(a[0])
	}
}

// model applies records to contents the way RocksDB applies them (merge:
// concatenation).
func model(records []record) map[uint32]map[string]string {
	out := map[uint32]map[string]string{0: {}, 1: {}}
	for _, rec := range records {
		kv := out[rec.cf]
		switch rec.kind {
		case writebatch.Put:
			kv[string(rec.key)] = string(rec.value)
		case writebatch.Merge:
			kv[string(rec.key)] += string(rec.value)
		case writebatch.Delete, writebatch.SingleDelete:
			delete(kv, string(rec.key))
		case writebatch.DeleteRange:
			for _, k := range slices.Collect(maps.Keys(kv)) {
				if k >= string(rec.key) && k < string(rec.value) {
					delete(kv, k)
				}
			}
		}
	}
	return out
}
