package shard

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"
)

// A shard database's table files carry a Bloom filter: a Get of an absent
// key is answered by the filter, not by reading a block of every table
// file (RocksDB's perf context counts both).
func TestShardDBGetOfAbsentKeyUsesTheFilter(t *testing.T) {
	d, err := openShardDB(t.TempDir(), rewriter{}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	b := grocksdb.NewWriteBatch()
	defer b.Destroy()
	for i := 0; i < 2000; i++ {
		b.Put(fmt.Appendf(nil, "keep/%06d", 2*i), []byte("v"))
	}
	if err := d.db.Write(d.wo, b); err != nil {
		t.Fatal(err)
	}
	fo := grocksdb.NewDefaultFlushOptions()
	defer fo.Destroy()
	if err := d.db.Flush(fo); err != nil {
		t.Fatal(err)
	}

	// The perf context is per OS thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	grocksdb.SetPerfLevel(grocksdb.KEnableCount)
	defer grocksdb.SetPerfLevel(grocksdb.KDisable)
	pc := grocksdb.NewPerfContext()
	defer pc.Destroy()
	pc.Reset()
	const gets = 200
	for i := 0; i < gets; i++ {
		v, err := d.db.GetBytes(d.ro, fmt.Appendf(nil, "keep/%06d", 2*i+1)) // between two stored keys
		if err != nil || v != nil {
			t.Fatalf("get absent key: %q, %v", v, err)
		}
	}
	// rocksdb_bloom_sst_miss_count (rocksdb/c.h): the filter ruled a file out.
	const bloomSSTMiss = 45
	if ruledOut := pc.Metric(bloomSSTMiss); ruledOut < gets*9/10 {
		t.Fatalf("the table file's filter ruled out %d of %d absent keys: no Bloom filter?\n%s", ruledOut, gets, pc.Report(true))
	}
}
