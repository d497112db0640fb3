package shard_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/benchround"
	"github.com/consumerd/consumerd/internal/natsproc"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// The idle benchmark's setup: idleBenchDefaultShards shards on one member
// (CONSUMERD_BENCH_IDLE_SHARDS for another count) under a memory budget of
// idleBenchBudget, idle for idleBenchWindow once every one is PRIMARY.
const (
	idleBenchDefaultShards = 200
	idleBenchShardsEnv     = "CONSUMERD_BENCH_IDLE_SHARDS"
	idleBenchBudget        = 256 << 20
	idleBenchWindow        = 10 * time.Second // one idle lag refresh cycle (idleLagTicks × 1 s)
	// idleBenchChildEnv makes the test binary the idle benchmark's child
	// (its value is the shard count), with the nats-server binary at
	// idleBenchNatsEnv.
	idleBenchChildEnv = "CONSUMERD_IDLEBENCH_CHILD"
	idleBenchNatsEnv  = "CONSUMERD_IDLEBENCH_NATS"
	idleBenchPrefix   = "IDLEBENCH "
)

// BenchmarkShardsIdle prints
//
//	BENCH shards.idle shards=N ready_s= rss_mb_per_shard= fds_per_shard= goroutines_per_shard= idle_cpu_ms_per_shard_s=
//
// A member process (the test binary again, so no round inherits another's
// heap) with a real embedded etcd, a nats-server process with JetStream
// and a RocksDB memory budget is assigned N wordcount shards whose source
// receives nothing. ready_s is the time from the first assignment until
// every replica is PRIMARY in etcd; the per-shard figures are the
// process's resident memory, open fds and goroutines once they are all
// PRIMARY minus the same process's with none, over N; idle_cpu is the
// process's CPU time per shard per second over an idle window after that
// (what timers firing while nothing happens cost).
func BenchmarkShardsIdle(b *testing.B) {
	n := idleBenchShards(b)
	bin := natsproc.Binary(b)
	b.Cleanup(natsproc.Cleanup)
	for i := 0; i < b.N; i++ {
		benchround.Run(b, benchround.Spec{
			Name:     "shards.idle",
			Params:   fmt.Sprintf("shards=%d budget_mb=%d", n, idleBenchBudget>>20),
			Rounds:   3,
			Headline: []string{"ready_s", "rss_mb_per_shard", "fds_per_shard", "goroutines_per_shard"},
		}, func(int) []benchround.Figure {
			f := idleBenchChild(b, bin, n)
			return []benchround.Figure{
				benchround.F("ready_s", f["ready_s"], 1),
				benchround.F("rss_mb_per_shard", f["rss_mb_per_shard"], 2),
				benchround.F("fds_per_shard", f["fds_per_shard"], 1),
				benchround.F("goroutines_per_shard", f["goroutines_per_shard"], 1),
				benchround.F("idle_cpu_ms_per_shard_s", f["idle_cpu_ms_per_shard_s"], 3),
			}
		})
	}
}

func idleBenchShards(tb testing.TB) int {
	tb.Helper()
	s := os.Getenv(idleBenchShardsEnv)
	if s == "" {
		return idleBenchDefaultShards
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q is not a positive shard count", idleBenchShardsEnv, s)
	}
	return n
}

// idleBenchChild runs the test binary as the idle benchmark's child with
// n shards and returns the figures it printed.
func idleBenchChild(b *testing.B, bin string, n int) map[string]float64 {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestIdleBenchChild$", "-test.count=1", "-test.v", "-test.timeout=20m")
	cmd.Env = append(os.Environ(), idleBenchChildEnv+"="+strconv.Itoa(n), idleBenchNatsEnv+"="+bin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("idle benchmark child: %v\n%s", err, out)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), idleBenchPrefix)
		if !ok {
			continue
		}
		figs := map[string]float64{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("idle benchmark child printed %q: %v", kv, err)
			}
			figs[k] = x
		}
		return figs
	}
	b.Fatalf("idle benchmark child printed no %q line:\n%s", idleBenchPrefix, out)
	return nil
}

// idleSample is what the process holds at one moment.
type idleSample struct {
	rssMB      float64
	fds        int
	goroutines int
	cpu        time.Duration
}

func takeIdleSample(tb testing.TB) idleSample {
	tb.Helper()
	runtime.GC()
	statm, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		tb.Fatalf("idle benchmark reads resident memory from /proc (Linux only): %v", err)
	}
	fields := strings.Fields(string(statm))
	pages, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		tb.Fatalf("/proc/self/statm %q: %v", statm, err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return idleSample{
		rssMB:      float64(pages*int64(os.Getpagesize())) / (1 << 20),
		fds:        len(fds),
		goroutines: runtime.NumGoroutine(),
		cpu:        time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
	}
}

// TestIdleBenchChild is BenchmarkShardsIdle's child process. Skipped unless
// the benchmark started it.
func TestIdleBenchChild(t *testing.T) {
	nstr := os.Getenv(idleBenchChildEnv)
	if nstr == "" {
		t.Skip("the shards.idle benchmark's child process")
	}
	n, err := strconv.Atoi(nstr)
	if err != nil {
		t.Fatal(err)
	}
	nats := natsproc.StartServer(t, os.Getenv(idleBenchNatsEnv), "-js", "-sd", filepath.Join(t.TempDir(), "js"))
	e := shardtest.NewCluster(t, jetstream.NewBuilder(jetstream.Config{URL: nats.URL()}), wordcount.App())
	e.LagInterval = shard.DefaultLagInterval
	e.ShareMemory(idleBenchBudget)
	node := e.StartNode("n", t.TempDir())
	for i := 0; i < n; i++ {
		e.PutSpec(shardtest.WordcountSpec(fmt.Sprintf("idle-%04d", i), i%shardtest.DefaultPartitions, 0))
	}
	// The member has read the specs and settled: the baseline.
	base := takeIdleSample(t)
	start := time.Now()
	for i := 0; i < n; i++ {
		e.Assign(node, fmt.Sprintf("idle-%04d", i), 0)
	}
	waitfor.Every(t, 50*time.Millisecond, 10*time.Minute, fmt.Sprintf("%d shards PRIMARY", n), func() (bool, string) {
		p := countPrimaries(t, e)
		return p == n, fmt.Sprintf("%d of %d PRIMARY", p, n)
	})
	ready := time.Since(start)
	loaded := takeIdleSample(t)
	// The idle window: nothing arrives; what runs is what idle shards cost
	// (CONSUMERD_IDLEBENCH_CPUPROF=FILE profiles it).
	if path := os.Getenv("CONSUMERD_IDLEBENCH_CPUPROF"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
	}
	allocProf := os.Getenv("CONSUMERD_IDLEBENCH_ALLOCPROF")
	writeAllocs(t, allocProf, ".before")
	time.Sleep(idleBenchWindow)
	pprof.StopCPUProfile() // a no-op when none runs
	writeAllocs(t, allocProf, ".after")
	after := takeIdleSample(t)
	fmt.Printf("%sready_s=%.3f rss_mb_per_shard=%.4f fds_per_shard=%.3f goroutines_per_shard=%.3f idle_cpu_ms_per_shard_s=%.4f\n",
		idleBenchPrefix, ready.Seconds(),
		(after.rssMB-base.rssMB)/float64(n),
		float64(after.fds-base.fds)/float64(n),
		float64(after.goroutines-base.goroutines)/float64(n),
		float64((after.cpu-loaded.cpu).Microseconds())/1e3/idleBenchWindow.Seconds()/float64(n))
	if os.Getenv("CONSUMERD_IDLEBENCH_PPROF") != "" {
		dumpIdleProfile(t, os.Getenv("CONSUMERD_IDLEBENCH_PPROF"))
	}
}

// writeAllocs writes the process's allocation profile so far to
// path+suffix (nothing when path is empty): the idle window's allocations
// are the difference of the two (go tool pprof -diff_base FILE.before
// FILE.after).
func writeAllocs(t *testing.T, path, suffix string) {
	if path == "" {
		return
	}
	runtime.GC() // the profile is as of the last collection
	f, err := os.Create(path + suffix)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
}

// countPrimaries is how many assignments' status in etcd is PRIMARY.
func countPrimaries(t testing.TB, e *shardtest.Cluster) int {
	resp, err := e.Client.Get(context.Background(), e.Prefix+"/assign/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	p := 0
	for _, kv := range resp.Kvs {
		st, err := allocator.DecodeReplicaStatus(kv.Value)
		if err == nil && st.State == allocator.StatePrimary {
			p++
		}
	}
	return p
}

// dumpIdleProfile writes the goroutine profile grouped by stack to path
// (CONSUMERD_IDLEBENCH_PPROF, to see what an idle shard holds).
func dumpIdleProfile(t *testing.T, path string) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("goroutine").WriteTo(f, 1); err != nil {
		t.Fatal(err)
	}
	// Then what each open fd is, its shard's name taken out.
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		kinds[idleFdName.ReplaceAllString(target, "idle-*")]++
	}
	for k, n := range kinds {
		fmt.Fprintf(f, "fd %d %s\n", n, k)
	}
}

// idleFdName is a shard's name in a path.
var idleFdName = regexp.MustCompile(`idle-[0-9]{4}`)
