package shard

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/rockstest"
	"github.com/consumerd/consumerd/shard/rocksmem"
)

// A shard database's table files carry a Bloom filter: a Get of an absent
// key is answered by the filter, not by reading a block of every table
// file (RocksDB's perf context counts both).
func TestShardDBGetOfAbsentKeyUsesTheFilter(t *testing.T) {
	d, err := openShardDB(t.TempDir(), rewriter{}, nil, hclog.NewNullLogger())
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

	const gets = 200
	var getErr error
	pc := rockstest.CountPerf(func() {
		for i := 0; i < gets && getErr == nil; i++ {
			v, err := d.db.GetBytes(d.ro, fmt.Appendf(nil, "keep/%06d", 2*i+1)) // between two stored keys
			if err == nil && v != nil {
				err = fmt.Errorf("absent key read %q", v)
			}
			getErr = err
		}
	})
	defer pc.Destroy()
	if getErr != nil {
		t.Fatalf("get absent key: %v", getErr)
	}
	if ruledOut := pc.Metric(rockstest.PerfBloomSSTMiss); ruledOut < gets*9/10 {
		t.Fatalf("the table file's filter ruled out %d of %d absent keys: no Bloom filter?\n%s", ruledOut, gets, pc.Report(true))
	}
}

// ownTable is an OptionsIniter that sets a table factory with its own
// block cache.
type ownTable struct{ rewriter }

func (ownTable) InitOptions(o *grocksdb.Options) {
	bbto := grocksdb.NewDefaultBlockBasedTableOptions()
	cache := grocksdb.NewLRUCache(8 << 20)
	bbto.SetBlockCache(cache)
	o.SetBlockBasedTableFactory(bbto)
	bbto.Destroy()
	cache.Destroy() // the factory holds its own reference
}

// With a member budget, a shard database writes its memtables against the
// budget and reads through the budget's block cache, also when its
// OptionsIniter set a table factory with a cache of its own.
func TestShardDBUsesTheBudgetOverAnOptionsIniter(t *testing.T) {
	mem, err := rocksmem.New(rocksmem.MinBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	d, err := openShardDB(t.TempDir(), ownTable{}, mem, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	b := grocksdb.NewWriteBatch()
	defer b.Destroy()
	for i := 0; i < 20000; i++ {
		b.Put(fmt.Appendf(nil, "keep/%06d", i), bytes.Repeat([]byte("v"), 100))
	}
	if err := d.db.Write(d.wo, b); err != nil {
		t.Fatal(err)
	}
	if s := mem.Stats(); s.WriteBufferUsage == 0 {
		t.Fatalf("budget %+v after a write: the memtable is not counted", s)
	}
	fo := grocksdb.NewDefaultFlushOptions()
	defer fo.Destroy()
	if err := d.db.Flush(fo); err != nil {
		t.Fatal(err)
	}
	before := mem.Stats().CacheUsage
	for i := 0; i < 20000; i += 50 {
		if _, err := d.db.GetBytes(d.ro, fmt.Appendf(nil, "keep/%06d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if after := mem.Stats().CacheUsage; after < before+(1<<20) {
		t.Fatalf("shared cache usage %d before reading the table file's blocks, %d after: the reads did not go through it", before, after)
	}
}
