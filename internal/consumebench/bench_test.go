package consumebench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/internal/benchround"
	"github.com/consumerd/consumerd/internal/gctarget"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// The realistic workload: realMsgs messages of realPayload incompressible
// bytes, each with its own key, over realParts partitions (one shard each).
const (
	realParts   = 2
	realMsgs    = 100_000
	realPayload = 1024
)

// BenchmarkConsumeRealistic measures the upsert application through the
// whole exactly-once path against the raw loop (see rawLoop) consuming the
// same stored messages in the same round, on one embedded nats-server:
//
//	BENCH consume.realistic keys=unique payload=1024 outputs=1 msgs=N rounds=K rate=R raw_rate=RAW ratio=X min=… max=… per_core=C raw_per_core=RC
//
// rate: messages per second from assignment until every shard committed
// its partition's last message and every output is stored. per_core:
// messages per CPU-second of the whole test process over the same span
// (user + system; the process also runs the embedded nats-server and etcd,
// on both sides alike). Goal: ratio ≥ 0.6.
func BenchmarkConsumeRealistic(b *testing.B) {
	realisticBench(b, "consume.realistic", 1, func(tb testing.TB) string { return natstest.Start(tb) })
}

// BenchmarkConsumeRealisticR3 is BenchmarkConsumeRealistic on a 3-node
// JetStream cluster (embedded, in this process) with every stream, input,
// recovery log and outputs, of 3 replicas, on both sides.
func BenchmarkConsumeRealisticR3(b *testing.B) {
	realisticBench(b, "consume.realistic.r3", 3, func(tb testing.TB) string { return natstest.StartCluster(tb, 3) })
}

func realisticBench(b *testing.B, name string, replicas int, start func(testing.TB) string) {
	gctarget.Apply() // as a member does (serve)
	if b.N > 1 {
		b.Skip("measured once at -benchtime 1x")
	}
	benchround.Run(b, benchround.Spec{
		Name:     name,
		Params:   fmt.Sprintf("keys=unique payload=%d outputs=1 msgs=%d", realPayload, realMsgs),
		Rounds:   3,
		Headline: []string{"ratio"},
	}, func(r int) []benchround.Figure {
		// The round's servers and data go when it ends.
		sc := benchround.NewScope(b)
		defer sc.Close()
		e := newRealistic(sc, start(sc), replicas, realMsgs)
		var fw, raw sideResult
		if r%2 == 0 {
			e.settle(sc)
			fw = e.framework(sc)
			e.settle(sc)
			raw = e.raw(sc)
		} else {
			e.settle(sc)
			raw = e.raw(sc)
			e.settle(sc)
			fw = e.framework(sc)
		}
		return []benchround.Figure{
			benchround.F("rate", fw.rate(), 0), benchround.F("raw_rate", raw.rate(), 0),
			benchround.F("ratio", fw.rate()/raw.rate(), 2),
			benchround.F("per_core", fw.perCore(), 0), benchround.F("raw_per_core", raw.perCore(), 0),
		}
	})
}

// sideResult is one side's measured span.
type sideResult struct {
	msgs    int
	elapsed time.Duration
	cpu     time.Duration
}

func (s sideResult) rate() float64    { return float64(s.msgs) / s.elapsed.Seconds() }
func (s sideResult) perCore() float64 { return float64(s.msgs) / s.cpu.Seconds() }

// processCPU is the CPU time (user + system) this process used so far.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs f and returns its span's wall and process CPU time.
func measure(tb testing.TB, msgs int, f func()) sideResult {
	cpu0, t0 := processCPU(tb), time.Now()
	f()
	return sideResult{msgs: msgs, elapsed: time.Since(t0), cpu: processCPU(tb) - cpu0}
}

// realistic is one round's environment: a cluster whose input topic holds
// the workload.
type realistic struct {
	url      string
	replicas int
	e        *shardtest.Cluster
}

func newRealistic(b testing.TB, url string, replicas, msgs int) *realistic {
	e := shardtest.NewCluster(b, jetstream.NewBuilder(jetstream.Config{URL: url, Replicas: replicas}), upsertApp())
	e.TxnMaxMessages = 0 // the service defaults
	e.LagInterval = shard.DefaultLagInterval
	for _, t := range []string{inputTopic, outputTopic} {
		e.PutTopic(topic.Description{Name: t, Partitions: realParts})
	}
	publishWorkload(e, msgs)
	return &realistic{url: url, replicas: replicas, e: e}
}

// settle waits, on a replicated cluster, until every replica of every
// stream has caught up with its leader, so neither side starts while the
// followers still copy what came before it (the workload, or the other
// side's outputs and logs) and pays for that replication.
func (r *realistic) settle(tb testing.TB) {
	if r.replicas <= 1 {
		return
	}
	nc, err := nats.Connect(r.url)
	if err != nil {
		tb.Fatal(err)
	}
	defer nc.Close()
	js, err := njs.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	shardtest.Eventually(tb, "every stream replica current", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		streams := js.ListStreams(ctx)
		for info := range streams.Info() {
			if info.Cluster == nil {
				continue
			}
			for _, p := range info.Cluster.Replicas {
				if !p.Current || p.Lag > 0 {
					return false, fmt.Sprintf("stream %s: replica %s current %v lag %d", info.Config.Name, p.Name, p.Current, p.Lag)
				}
			}
		}
		if err := streams.Err(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// specs writes the specs of the upsert shards, one per partition.
func (r *realistic) specs() []*shard.Spec {
	var specs []*shard.Spec
	for p := 0; p < realParts; p++ {
		s := &shard.Spec{ID: fmt.Sprintf("upsert-%04d", p), App: "upsert", Sources: []shard.Source{{Topic: inputTopic, Partition: p}}}
		r.e.PutSpec(s)
		specs = append(specs, s)
	}
	return specs
}

// publishWorkload publishes n messages with unique keys and incompressible
// payloads to inputTopic.
func publishWorkload(e *shardtest.Cluster, n int) {
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	e.PublishAll(topic.Description{Name: inputTopic, Partitions: realParts}, n, func(i int) message.MutableMessage {
		payload := make([]byte, realPayload)
		for j := range payload {
			payload[j] = byte(rng.Uint32())
		}
		return message.MutableMessage{Key: fmt.Sprintf("key-%09d", i), Payload: payload}
	})
}

// framework runs the upsert app's shards on a fresh node until every
// partition's last message is committed and every output stored, checks
// the outcome is exact, and stops the node.
func (r *realistic) framework(b testing.TB) sideResult {
	e := r.e
	n := e.StartNode("bench", b.TempDir())
	defer n.Kill() // no idle node of this round runs during the next
	specs := r.specs()
	last := map[string]message.MessageID{}
	for _, s := range specs {
		last[s.Sources[0].Channel()] = e.LastID(s.Sources[0].Channel())
	}
	outDesc := topic.Description{Name: outputTopic, Partitions: realParts}
	res := measure(b, realMsgs, func() {
		for _, s := range specs {
			e.Assign(n, s.ID, 0)
		}
		waitCommitted(b, n, specs, last)
		waitOutputs(b, e, realMsgs)
	})
	if got := e.CountTopic(outDesc); got != realMsgs {
		b.Fatalf("%s holds %d messages, want %d (exactly one per input)", outputTopic, got, realMsgs)
	}
	keys := 0
	for _, s := range specs {
		keys += countRecords(b, n, s.ID)
	}
	if keys != realMsgs {
		b.Fatalf("the shards hold %d records with count 1, want %d", keys, realMsgs)
	}
	return res
}

// committedOffset is the offset of channel ch that shard id's primary on n
// committed (ok false: not primary, or nothing committed yet).
func committedOffset(n *shardtest.Node, id, ch string) (message.MessageID, bool) {
	sh, release, ok := n.Service.Primary(id)
	if !ok {
		return 0, false
	}
	defer release()
	off, ok, err := recoverylog.LoadOffset(sh.Database(), ch)
	return off.ID, ok && err == nil
}

// countRecords counts shard id's records whose count is 1 (each key was
// consumed once).
func countRecords(b testing.TB, n *shardtest.Node, id string) int {
	sh, release, ok := n.Service.Primary(id)
	if !ok {
		b.Fatalf("%s is not primary", id)
	}
	defer release()
	it := sh.Database().NewIterator(sh.ReadOptions())
	defer it.Close()
	c := 0
	for it.Seek([]byte(keyPrefix)); it.ValidForPrefix([]byte(keyPrefix)); it.Next() {
		v := it.Value()
		if cnt, err := recordCount(v.Data()); err == nil && cnt == 1 {
			c++
		}
		v.Free()
	}
	return c
}

// raw runs one raw loop per partition, in parallel, over the same stored
// messages, and checks each consumed its whole partition and published one
// output per message.
func (r *realistic) raw(b testing.TB) sideResult {
	nc, err := nats.Connect(r.url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := njs.New(nc, njs.WithPublishAsyncMaxPending(1<<15))
	if err != nil {
		b.Fatal(err)
	}
	loops := make([]*rawLoop, realParts)
	for p := range loops {
		loops[p] = newRawLoop(b, js, p, r.replicas)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	counts := make([]int, realParts)
	errs := make([]error, realParts)
	dirs := make([]string, realParts)
	for p := range dirs {
		dirs[p] = b.TempDir()
	}
	res := measure(b, realMsgs, func() {
		var wg sync.WaitGroup
		for p, l := range loops {
			wg.Add(1)
			go func() {
				defer wg.Done()
				counts[p], errs[p] = l.run(ctx, dirs[p])
			}()
		}
		wg.Wait()
	})
	total := 0
	for p := range loops {
		if errs[p] != nil {
			b.Fatalf("raw loop %d: %v", p, errs[p])
		}
		total += counts[p]
		st, err := js.Stream(ctx, fmt.Sprintf("rawout_%d", p))
		if err != nil {
			b.Fatal(err)
		}
		if got := st.CachedInfo().State.Msgs; got != uint64(counts[p]) {
			b.Fatalf("raw output %d holds %d messages, want %d", p, got, counts[p])
		}
	}
	if total != realMsgs {
		b.Fatalf("raw loops consumed %d messages, want %d", total, realMsgs)
	}
	return res
}
