package rockstest

import (
	"runtime"
	"testing"

	"github.com/linxGnu/grocksdb"
)

// Open opens a fresh RocksDB in a directory of the test's with default
// options, closed when the test ends (after the cleanups registered later,
// such as those of options used with it).
func Open(t testing.TB) *grocksdb.DB {
	t.Helper()
	opts := grocksdb.NewDefaultOptions()
	opts.SetCreateIfMissing(true)
	defer opts.Destroy()
	db, err := grocksdb.OpenDb(opts, t.TempDir())
	if err != nil {
		t.Fatalf("open rocksdb: %v", err)
	}
	t.Cleanup(db.Close)
	return db
}

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

// Counters of RocksDB's perf context, by their index in rocksdb/c.h
// (grocksdb.PerfContext.Metric).
const (
	PerfUserKeyComparisons = 0  // rocksdb_user_key_comparison_count
	PerfBloomSSTMiss       = 45 // rocksdb_bloom_sst_miss_count: a table file's filter ruled a key out
)

// CountPerf runs f with RocksDB's perf counters on and returns what they
// counted; the caller destroys the context. The counters are per OS
// thread, so f runs with the goroutine locked to its thread and must make
// its RocksDB calls itself.
func CountPerf(f func()) *grocksdb.PerfContext {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	grocksdb.SetPerfLevel(grocksdb.KEnableCount)
	defer grocksdb.SetPerfLevel(grocksdb.KDisable)
	pc := grocksdb.NewPerfContext()
	pc.Reset()
	f()
	return pc
}
