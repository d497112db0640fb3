package nexmark

import (
	"context"
	"fmt"
	"hash/maphash"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/internal/benchround"
	"github.com/consumerd/consumerd/internal/gctarget"
	"github.com/consumerd/consumerd/internal/natsproc"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
	"github.com/consumerd/consumerd/windows"
)

// flinkPerCore is Flink's throughput per core in the Nexmark V1 guide
// (events/s per core; ../shared/notes/nexmark.md, column V1: 100 M events,
// 8 TaskManagers of one slot, RocksDB incremental checkpoints every 3 min,
// exactly once, on 3 workers of 8 cores).
var flinkPerCore = map[string]float64{
	"q0": 155e3, "q1": 158e3, "q2": 175e3, "q3": 152e3, "q4": 34e3,
	"q5": 22e3, "q7": 12e3, "q8": 146e3, "q9": 14e3,
}

// benchEvents is the run size: CONSUMERD_NEXMARK_EVENTS, or 1 M, sized
// so that every query over every round fits make bench-nexmark's 15 minutes
// on 2 cores.
func benchEvents(b *testing.B) uint64 {
	if s := os.Getenv("CONSUMERD_NEXMARK_EVENTS"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			b.Fatalf("CONSUMERD_NEXMARK_EVENTS=%q: not a positive integer", s)
		}
		return n
	}
	return 1_000_000
}

// benchPartitions: one source partition per core here.
const benchPartitions = 2

// BenchmarkNexmark runs each query over the same generated events and
// reports BENCH nexmark.qN: events per CPU-second of the member, against
// Flink's per-core figure.
//
// Per round: a fresh JetStream nats-server process (the broker: not counted)
// stores the run's events before anything is measured (the generator: not
// counted); then each query in turn gets a fresh member (a shard service in
// this process, primaries only, as Flink runs without standbys) that runs
// only that query's shards, and the span from its assignments to its final
// stage's committed end of input is timed (its outputs are then published
// or queued: the drainer holds at most a few transactions, as a primary
// whose outputs fall behind stops consuming), with this process's CPU
// (getrusage; it also hosts the test's etcd, idle meanwhile). Every query's
// output is then checked against its model, outside the span.
func BenchmarkNexmark(b *testing.B) {
	gctarget.Apply() // as a member does (serve)
	events := benchEvents(b)
	g, err := NewGenerator(1, DefaultRate)
	if err != nil {
		b.Fatal(err)
	}
	qs := benchQueries(b)
	// Only the models' digests stay in memory: a live heap of a million
	// model rows per query, which no member holds, made every span pay for
	// a larger heap (page faults on fresh spans), so a query measured lower
	// after another than alone.
	seed := maphash.MakeSeed()
	models := map[string]rowDigest{}
	for _, q := range qs {
		models[q.Name] = digestOf(seed, q.Model(g.Events(events)))
	}
	type span struct{ wall, cpu time.Duration }
	results := map[string][]span{}
	rounds := benchround.Rounds(b, 3)
	for r := 0; r < rounds; r++ {
		// The round's nats-server, etcd and data go when it ends.
		sc := benchround.NewScope(b)
		url, _ := natsproc.Start(sc)
		e := shardtest.NewCluster(sc, jetstream.NewBuilder(jetstream.Config{URL: url}), Apps()...)
		e.TxnMaxMessages = 0 // the service defaults
		e.LagInterval = shard.DefaultLagInterval
		for _, name := range SourceTopics {
			e.PutTopic(topic.Description{Name: name, Partitions: benchPartitions})
		}
		for _, q := range qs {
			for _, ts := range q.Topics {
				e.PutTopic(topic.Description{Name: ts.Name, Partitions: ts.Partitions(benchPartitions)})
			}
		}
		publishRun(sc, e, g, events)
		for _, q := range qs {
			s, rows := runOne(sc, e, q, r)
			results[q.Name] = append(results[q.Name], span{s.wall, s.cpu})
			b.Logf("round %d %s: %.2fs wall, %.2fs cpu, %.0f events/s per core", r+1, q.Name, s.wall.Seconds(), s.cpu.Seconds(), float64(events)/s.cpu.Seconds())
			if digestOf(seed, rows) != models[q.Name] {
				b.Fatalf("%s: output differs from the model: %s", q.Name, Diff(rows, q.Model(g.Events(events))))
			}
		}
		sc.Close()
	}
	for _, q := range qs {
		res := benchround.Collect(b, len(results[q.Name]), func(r int) []benchround.Figure {
			s := results[q.Name][r]
			perCore := float64(events) / s.cpu.Seconds()
			return []benchround.Figure{
				benchround.F("events_s", float64(events)/s.wall.Seconds(), 0),
				benchround.F("cpu_s", s.cpu.Seconds(), 2),
				benchround.F("per_core", perCore, 0),
				benchround.F("ratio", perCore/flinkPerCore[q.Name], 2),
			}
		})
		fmt.Printf("BENCH nexmark.%s events=%d partitions=%d rounds=%d events_s=%.0f cpu_s=%.2f per_core=%.0f flink_per_core=%.0f ratio=%.2f min=%.2f max=%.2f\n",
			q.Name, events, benchPartitions, res.Rounds(), res.Median("events_s"), res.Median("cpu_s"), res.Median("per_core"),
			flinkPerCore[q.Name], res.Median("ratio"), res.Min("ratio"), res.Max("ratio"))
	}
}

// rowDigest is a multiset's fingerprint: its size and the sum of its rows'
// hashes, so that the order of rows does not matter and a duplicate counts.
type rowDigest struct {
	n   int
	sum uint64
}

func digestOf(seed maphash.Seed, rows []string) rowDigest {
	d := rowDigest{n: len(rows)}
	for _, r := range rows {
		d.sum += maphash.String(seed, r)
	}
	return d
}

func outputPartitions(q Query) int {
	for _, ts := range q.Topics {
		if ts.Name == q.Output {
			return ts.Partitions(benchPartitions)
		}
	}
	return benchPartitions
}

// publishRun stores events 0 … n-1 and the end marks, all in flight at once.
func publishRun(b testing.TB, e *shardtest.Cluster, g Generator, n uint64) {
	var ev Event
	var i uint64
	errc := make(chan error, 1)
	done := make(chan struct{}, 4096)
	inflight := 0
	for i = 0; i < n; i++ {
		g.Event(i, &ev)
		d := topic.Description{Name: ev.Topic(), Partitions: benchPartitions}
		msg := message.MutableMessage{Key: ev.Key(), Payload: ev.Append(nil), DedupeID: "nexmark/1/" + strconv.FormatUint(i, 10)}
		for inflight >= cap(done) {
			<-done
			inflight--
		}
		inflight++
		e.Pub.PublishAsync(context.Background(), d, msg, func(_ topic.Partition, _ message.MessageID, err error) {
			if err != nil {
				select {
				case errc <- fmt.Errorf("event %s: %w", msg.DedupeID, err):
				default:
				}
			}
			done <- struct{}{}
		})
	}
	for ; inflight > 0; inflight-- {
		<-done
	}
	select {
	case err := <-errc:
		b.Fatal(err)
	default:
	}
	for _, name := range SourceTopics {
		for p := 0; p < benchPartitions; p++ {
			end := windows.Mark{Sender: 0, Senders: 1, Time: windows.MaxTime}.Message()
			if _, err := e.Pub.PublishTo(context.Background(), topic.Partition{Topic: name, Index: p}, end); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// runOne runs query q on a fresh member until its final stage committed its
// end of input, and returns the span and, once published, the output rows.
func runOne(b testing.TB, e *shardtest.Cluster, q Query, round int) (struct{ wall, cpu time.Duration }, []string) {
	apps := map[string]shard.App{}
	var ids, final []string
	var specs []*shard.Spec
	for i, app := range q.Stages {
		apps[app.Name] = app
		n := benchPartitions
		for _, ts := range q.Topics {
			if ts.Name == app.Topics[0] {
				n = ts.Partitions(benchPartitions)
			}
		}
		ss, err := app.SpecsFor(n, 0)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range ss {
			specs = append(specs, s)
			ids = append(ids, s.ID)
			if i == len(q.Stages)-1 {
				final = append(final, s.ID)
			}
		}
	}
	node := e.StartNodeApps(fmt.Sprintf("%s-%d", q.Name, round), b.TempDir(), apps)
	defer node.Kill()
	// Each span starts from this process's own small heap, not the garbage
	// of the previous query's output check.
	debug.FreeOSMemory()
	stopProfile := spanProfile(b, q.Name, round)
	cpu0, t0 := processCPU(b), time.Now()
	for _, s := range specs {
		e.PutSpec(s)
		e.Assign(node, s.ID, 0)
	}
	waitfor.Every(b, benchPoll, 10*time.Minute, q.Name+"'s final stage to commit its end of input", func() (bool, string) {
		for _, id := range final {
			sh, release, ok := node.Service.Primary(id)
			if !ok {
				return false, id + " not primary yet"
			}
			wm, err := CommittedWatermark(sh)
			release()
			if err != nil {
				b.Fatal(err)
			}
			if wm != windows.MaxTime {
				return false, fmt.Sprintf("%s at watermark %d", id, wm)
			}
		}
		return true, ""
	})
	s := struct{ wall, cpu time.Duration }{time.Since(t0), processCPU(b) - cpu0}
	stopProfile()
	for _, id := range ids {
		if st, ok := e.Status(node, id, 0); !ok || st.State != allocator.StatePrimary {
			b.Fatalf("%s: %+v", id, st)
		}
	}
	var rows []string
	waitfor.Every(b, benchPoll, 2*time.Minute, q.Name+"'s output to be published", func() (bool, string) {
		var done bool
		var why string
		rows, done, why = readOutput(b, e, topic.Description{Name: q.Output, Partitions: outputPartitions(q)})
		return done, why
	})
	return s, rows
}

// processCPU is the CPU time (user + system) this process used so far.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchPoll is how often a query run polls for its end: a committed
// watermark has no notification, and each poll reads the member's RocksDB
// inside the measured span, so polls are few enough to cost the measured
// process little yet often enough to add little to a span of seconds. (A
// whole run can outlast shardtest.Eventually's 30 s, hence the explicit
// timeouts.)
const benchPoll = 50 * time.Millisecond

// benchQueries are the queries to run: CONSUMERD_NEXMARK_QUERIES (e.g.
// "q0,q5", to profile one), or all.
func benchQueries(b *testing.B) []Query {
	s := os.Getenv("CONSUMERD_NEXMARK_QUERIES")
	if s == "" {
		return Queries()
	}
	var qs []Query
	for _, name := range strings.Split(s, ",") {
		q, ok := Lookup(strings.TrimSpace(name))
		if !ok {
			b.Fatalf("CONSUMERD_NEXMARK_QUERIES=%q: no query %q", s, name)
		}
		qs = append(qs, q)
	}
	return qs
}

// spanProfile starts a CPU profile of one query's measured span when
// CONSUMERD_NEXMARK_CPUPROFILE names a directory (a whole-benchmark
// -cpuprofile would mix in the generator and the checks): <dir>/<qN>-<round>.prof.
func spanProfile(b testing.TB, query string, round int) (stop func()) {
	dir := os.Getenv("CONSUMERD_NEXMARK_CPUPROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.prof", query, round)))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}
