package rockstest

import (
	"testing"

	"github.com/linxGnu/grocksdb"
)

// Pairs returns every key/value of db in key order.
func Pairs(t testing.TB, db *grocksdb.DB) [][2]string {
	t.Helper()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	it := db.NewIterator(ro)
	defer it.Close()
	var out [][2]string
	for it.SeekToFirst(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		out = append(out, [2]string{string(k.Data()), string(v.Data())})
		k.Free()
		v.Free()
	}
	if err := it.Err(); err != nil {
		t.Fatalf("iterating the database: %v", err)
	}
	return out
}

// Map returns every key/value of db.
func Map(t testing.TB, db *grocksdb.DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, kv := range Pairs(t, db) {
		out[kv[0]] = kv[1]
	}
	return out
}

// MapDir opens the database at dir read-only (its owner must have closed
// it) and returns every key/value.
func MapDir(t testing.TB, dir string) map[string]string {
	t.Helper()
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	db, err := grocksdb.OpenDbForReadOnly(opts, dir, false)
	if err != nil {
		t.Fatalf("open %s read-only: %v", dir, err)
	}
	defer db.Close()
	return Map(t, db)
}
