package shard

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/benchround"
	"github.com/consumerd/consumerd/shard/rocksmem"
)

// The memory benchmark's workload: memBenchShards shard databases written
// memBenchWrite bytes in transaction-sized batches, spread at random, with
// a budget of memBenchBudget (or none: the unbounded baseline).
const (
	memBenchShards = 256
	memBenchBudget = 512 << 20
	memBenchWrite  = 768 << 20
	memBenchValue  = 4 << 10
	memBenchBatch  = 16 // values per batch: 64 KiB, a transaction's worth
	// memBenchChildEnv makes the test binary a memory benchmark child:
	// "idle", "bounded" or "unbounded", in the directory memBenchDirEnv.
	memBenchChildEnv = "CONSUMERD_MEMBENCH_CHILD"
	memBenchDirEnv   = "CONSUMERD_MEMBENCH_DIR"
)

// BenchmarkShardsMemory prints
//
//	BENCH shards.memory shards=256 budget_mb=512 rss_mb= fixed_mb= unbounded_rss_mb= ratio=
//
// rss_mb is the peak resident memory of a process holding 256 shard
// databases (opened as a replica opens them: openShardDB, DBOptions) that
// is written 768 MiB in 64 KiB batches under a 512 MiB budget; fixed_mb that
// of the same process opening the databases without writing (the
// process's fixed cost); unbounded_rss_mb that of the same writes without
// a budget (each database sizes its own memtables: they keep all of it).
// ratio is rss_mb over unbounded_rss_mb. Each side runs in a process of
// its own (the test binary again), so no side inherits another's heap.
func BenchmarkShardsMemory(b *testing.B) {
	for i := 0; i < b.N; i++ {
		benchround.Run(b, benchround.Spec{
			Name:     "shards.memory",
			Params:   fmt.Sprintf("shards=%d budget_mb=%d write_mb=%d", memBenchShards, memBenchBudget>>20, memBenchWrite>>20),
			Rounds:   3,
			Headline: []string{"rss_mb", "ratio"},
		}, func(r int) []benchround.Figure {
			fixed := memBenchChild(b, "idle")
			bounded := memBenchChild(b, "bounded")
			unbounded := memBenchChild(b, "unbounded")
			if bounded > memBenchBudget>>20+fixed+memBenchSlackMB {
				b.Errorf("round %d: peak RSS %.0f MB is over the budget %d MB plus the fixed cost %.0f MB (+%d)", r, bounded, memBenchBudget>>20, fixed, memBenchSlackMB)
			}
			return []benchround.Figure{
				benchround.F("rss_mb", bounded, 0), benchround.F("fixed_mb", fixed, 0),
				benchround.F("unbounded_rss_mb", unbounded, 0), benchround.F("ratio", bounded/unbounded, 2),
			}
		})
	}
}

// memBenchSlackMB is what the benchmark lets a process exceed the budget
// plus its fixed cost by: RocksDB memory the cache does not account for
// (table readers, flush and compaction buffers) and allocator slack.
const memBenchSlackMB = 64

// memBenchChild runs the test binary as a memory benchmark child of mode
// and returns its peak resident memory in MB.
func memBenchChild(b *testing.B, mode string) float64 {
	b.Helper()
	dir, err := os.MkdirTemp(memBenchTmp(), "membench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryBenchChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), memBenchChildEnv+"="+mode, memBenchDirEnv+"="+dir)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("memory benchmark child %s: %v\n%s", mode, err, out)
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		b.Fatalf("memory benchmark child %s: no resource usage on this platform", mode)
	}
	mb := float64(ru.Maxrss) / 1024 // KiB on Linux
	b.Logf("child %s: peak RSS %.0f MB in %s", mode, mb, time.Since(start).Round(time.Millisecond))
	return mb
}

// memBenchTmp is where the children's databases go: tmpfs when there is
// one, where opening 256 databases pays no disk syncs (file pages are not
// the process's resident memory either way).
func memBenchTmp() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// TestMemoryBenchChild is BenchmarkShardsMemory's child process: it opens
// memBenchShards shard databases (with the budget unless unbounded) and,
// unless idle, writes them memBenchWrite bytes. Skipped unless the
// benchmark started it.
func TestMemoryBenchChild(t *testing.T) {
	mode := os.Getenv(memBenchChildEnv)
	if mode == "" {
		t.Skip("the shards.memory benchmark's child process")
	}
	var mem *rocksmem.Budget
	if mode != "unbounded" {
		var err error
		if mem, err = rocksmem.New(memBenchBudget); err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
	}
	dbs := make([]*shardDB, memBenchShards)
	for i := range dbs {
		d, err := openShardDB(filepath.Join(os.Getenv(memBenchDirEnv), strconv.Itoa(i)), nil, mem, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		dbs[i] = d
	}
	// The peak is reached: exit without closing (closing would flush every
	// memtable, which only lengthens the benchmark).
	defer os.Exit(0)
	if mode == "idle" {
		return
	}
	rng := rand.New(rand.NewPCG(7, uint64(len(mode))))
	// Values compress (the memtable holds them whole; flushes stay cheap).
	val := make([]byte, memBenchValue)
	for i := range val {
		val[i] = byte('a' + i%16)
	}
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	for n := 0; n < memBenchWrite/(memBenchValue*memBenchBatch); n++ {
		wb.Clear()
		for range memBenchBatch {
			copy(val, strconv.AppendUint(nil, rng.Uint64(), 16))
			wb.Put(fmt.Appendf(nil, "k/%016x", rng.Uint64()), val)
		}
		d := dbs[rng.IntN(len(dbs))]
		if err := d.db.Write(d.wo, wb); err != nil {
			t.Fatal(err)
		}
	}
	if mem != nil {
		fmt.Printf("budget after the writes: %+v\n", mem.Stats())
	}
}
