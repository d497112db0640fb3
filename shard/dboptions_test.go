package shard

import (
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/rockstest"
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
