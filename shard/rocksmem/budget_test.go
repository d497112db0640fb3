package rocksmem

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/linxGnu/grocksdb"
	"github.com/prometheus/client_golang/prometheus"
)

// budgetedOptions are RocksDB's defaults with a block based table factory
// (as shard.DefaultDBOptions), the budget applied.
func budgetedOptions(t *testing.T, b *Budget) *grocksdb.Options {
	t.Helper()
	opts := grocksdb.NewDefaultOptions()
	bbto := grocksdb.NewDefaultBlockBasedTableOptions()
	opts.SetBlockBasedTableFactory(bbto)
	bbto.Destroy()
	opts.SetCreateIfMissing(true)
	if err := b.Apply(opts); err != nil {
		t.Fatal(err)
	}
	return opts
}

// Many databases written hard through one budget: the memtables of all of
// them together stay within the write buffer limit (RocksDB's own per
// database figures, not only the manager's), the shared cache holds them
// (charged) and the blocks read, and never more than its capacity. Without
// the shared write buffer manager each database would keep all it was
// written (an eighth of its 64 MiB memtable) in memory: twice the budget.
func TestBudgetBoundsMemoryAcrossDatabases(t *testing.T) {
	const (
		dbs    = 32
		value  = 4 << 10
		batch  = 16 // values per write
		writes = 2 * MinBytes / (value * batch)
	)
	b, err := New(MinBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if s := b.Stats(); s.CacheCapacity != MinBytes || s.WriteBufferLimit != MinBytes/2 {
		t.Fatalf("stats %+v: want cache capacity %d and write buffer limit %d", s, MinBytes, MinBytes/2)
	}
	opened := make([]*grocksdb.DB, dbs)
	for i := range opened {
		opts := budgetedOptions(t, b)
		db, err := grocksdb.OpenDb(opts, t.TempDir())
		opts.Destroy()
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		opened[i] = db
	}
	wo := grocksdb.NewDefaultWriteOptions()
	wo.DisableWAL(true)
	defer wo.Destroy()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()

	// A write can pass the limit by what it adds before the next one stalls.
	const slack = batch*value*2 + arenaBlockBytes*dbs
	rng := rand.New(rand.NewPCG(1, 2))
	pool := make([]byte, 1<<20) // incompressible values, cut from one random pool
	for j := range pool {
		pool[j] = byte(rng.Uint32())
	}
	var peak Stats
	for w := 0; w < writes; w++ {
		wb.Clear()
		for range batch {
			off := rng.IntN(len(pool) - value)
			wb.Put(fmt.Appendf(nil, "k%08d", rng.IntN(1<<20)), pool[off:off+value])
		}
		db := opened[rng.IntN(dbs)]
		if err := db.Write(wo, wb); err != nil {
			t.Fatal(err)
		}
		if _, err := db.GetBytes(ro, fmt.Appendf(nil, "k%08d", rng.IntN(1<<20))); err != nil {
			t.Fatal(err)
		}
		if w%64 != 0 {
			continue
		}
		s := b.Stats()
		var memtables uint64
		for _, db := range opened {
			n, _ := db.GetIntProperty("rocksdb.size-all-mem-tables")
			memtables += n
		}
		if memtables > s.WriteBufferLimit+slack || s.WriteBufferUsage > s.WriteBufferLimit+slack {
			t.Fatalf("after %d of %d writes the memtables of %d databases hold %d bytes (manager: %d), over the limit %d (+%d)",
				w, writes, dbs, memtables, s.WriteBufferUsage, s.WriteBufferLimit, slack)
		}
		if s.CacheUsage > s.CacheCapacity+slack {
			t.Fatalf("after %d writes the shared cache holds %d bytes, over its capacity %d (+%d)", w, s.CacheUsage, s.CacheCapacity, slack)
		}
		peak.CacheUsage = max(peak.CacheUsage, s.CacheUsage)
		peak.WriteBufferCharged = max(peak.WriteBufferCharged, s.WriteBufferCharged)
	}
	if peak.WriteBufferCharged == 0 || peak.CacheUsage < MinBytes/4 {
		t.Fatalf("peak %+v: memtables were not charged to the shared cache", peak)
	}
	t.Logf("peak cache usage %d of %d, charged memtables %d", peak.CacheUsage, MinBytes, peak.WriteBufferCharged)
}

// Apply sets the cache and the manager on the C++ options behind grocksdb's
// handle, also over a table factory an application set, and fails once the
// budget is closed.
func TestApplySetsTheSharedObjects(t *testing.T) {
	b, err := New(MinBytes)
	if err != nil {
		t.Fatal(err)
	}
	opts := budgetedOptions(t, b)
	defer opts.Destroy()
	if !b.applied(opts) {
		t.Fatal("options do not carry the budget's cache and write buffer manager")
	}
	if opts.GetArenaBlockSize() != arenaBlockBytes {
		t.Fatalf("arena block size %d, want %d", opts.GetArenaBlockSize(), arenaBlockBytes)
	}

	own := grocksdb.NewDefaultOptions() // an OptionsIniter's own table factory and arena
	defer own.Destroy()
	bbto := grocksdb.NewDefaultBlockBasedTableOptions()
	cache := grocksdb.NewLRUCache(1 << 20)
	bbto.SetBlockCache(cache)
	own.SetBlockBasedTableFactory(bbto)
	bbto.Destroy()
	cache.Destroy()
	own.SetArenaBlockSize(1 << 20)
	if err := b.Apply(own); err != nil {
		t.Fatal(err)
	}
	if !b.applied(own) || own.GetArenaBlockSize() != 1<<20 {
		t.Fatalf("applied %v, arena block %d: want the shared objects and the application's arena", b.applied(own), own.GetArenaBlockSize())
	}

	b.Close()
	b.Close()
	if err := b.Apply(own); err != ErrClosed {
		t.Fatalf("Apply after Close: %v, want ErrClosed", err)
	}
	if s := b.Stats(); s != (Stats{}) {
		t.Fatalf("stats after Close %+v, want zero", s)
	}
}

func TestNewRefusesABudgetBelowTheMinimum(t *testing.T) {
	if _, err := New(MinBytes - 1); err == nil {
		t.Fatal("New accepted a budget below MinBytes")
	}
}

// The gauges report the live budgets, and forget a closed one.
func TestMetricsReportTheBudget(t *testing.T) {
	gauge := func(name string) float64 {
		t.Helper()
		mfs, err := prometheus.DefaultGatherer.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	b, err := New(2 * MinBytes)
	if err != nil {
		t.Fatal(err)
	}
	if got := gauge("consumerd_rocksdb_block_cache_capacity_bytes"); got != 2*MinBytes {
		t.Fatalf("cache capacity gauge %v, want %d", got, 2*MinBytes)
	}
	if got := gauge("consumerd_rocksdb_write_buffer_limit_bytes"); got != MinBytes {
		t.Fatalf("write buffer limit gauge %v, want %d", got, MinBytes)
	}
	b.Close()
	if got := gauge("consumerd_rocksdb_block_cache_capacity_bytes"); got != 0 {
		t.Fatalf("cache capacity gauge %v after Close, want 0", got)
	}
}
