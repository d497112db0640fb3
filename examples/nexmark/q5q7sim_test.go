package nexmark

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/windows"
)

// winSim runs a query's stages in-process over hand-built events: every
// shard of every stage on its own RocksDB, topics as in-memory logs, and
// transactions of random sizes run on randomly picked shards (so stage-1
// results interleave on the single partition in varying orders). With crash,
// a transaction is sometimes discarded before its commit (its writes, its
// outputs, its offsets) and the shard's consumer replaced, as a failover does;
// sometimes the consumer is replaced after a commit. Commits apply at once
// (there is no in-flight transaction).
type winSim struct {
	t      testing.TB
	rng    *rand.Rand
	crash  bool
	topics map[string][][]message.ImmutableMessage
	shards []*winShard
}

func newWinSim(t testing.TB, q Query, parts int, seed uint64, crash bool) *winSim {
	t.Helper()
	sim := &winSim{t: t, rng: rand.New(rand.NewPCG(seed, 57)), crash: crash, topics: map[string][][]message.ImmutableMessage{}}
	for _, name := range SourceTopics {
		sim.topics[name] = make([][]message.ImmutableMessage, parts)
	}
	for _, ts := range q.Topics {
		sim.topics[ts.Name] = make([][]message.ImmutableMessage, ts.Partitions(parts))
	}
	for _, app := range q.Stages {
		n := len(sim.topics[app.Topics[0]])
		for i := 0; i < n; i++ {
			spec := &shard.Spec{ID: fmt.Sprintf("%s-%04d", app.Name, i), App: app.Name}
			for _, tp := range app.Topics {
				spec.Sources = append(spec.Sources, shard.Source{Topic: tp, Partition: i})
			}
			sim.shards = append(sim.shards, newWinShard(t, sim, app, spec, i))
		}
	}
	return sim
}

// publish appends msg to a partition's log.
func (sim *winSim) publish(part topic.Partition, msg message.MutableMessage) {
	log := sim.topics[part.Topic]
	log[part.Index] = append(log[part.Index], message.ImmutableMessage{
		Channel:    part.Channel(),
		ID:         message.MessageID(len(log[part.Index]) + 1),
		Key:        msg.Key,
		Payload:    bytes.Clone(msg.Payload),
		Properties: maps.Clone(msg.Properties),
	})
}

// pub is a publisher for one transaction of the simulation's shards: it
// stages the messages, which txn publishes if it commits.
func (sim *winSim) pub() *fakePub {
	return &fakePub{parts: func(name string) (int, error) {
		log, ok := sim.topics[name]
		if !ok {
			return 0, fmt.Errorf("fakePub: unknown topic %q", name)
		}
		return len(log), nil
	}}
}

// run runs the events to the end (see runToEnd) and returns the rows of out,
// failing if a shard holds keys of the logic's state at the end.
func (sim *winSim) run(events []Event, out string) []string {
	sim.t.Helper()
	rows := sim.runToEnd(events, out)
	for _, s := range sim.shards {
		if n := s.stateKeys(); n != 0 {
			sim.t.Errorf("%s: %d keys of the logic's state left at the end", s.spec.ID, n)
		}
	}
	return rows
}

// runToEnd publishes the events (each to its topic, by key), ends every
// source partition, runs transactions until no shard has input left, and
// returns the rows of out (failing unless every partition of out was ended
// by every sender).
func (sim *winSim) runToEnd(events []Event, out string) []string {
	sim.t.Helper()
	for i := range events {
		e := &events[i]
		n := len(sim.topics[e.Topic()])
		part := topic.Partition{Topic: e.Topic(), Index: topic.PartitionFor(e.Key(), n)}
		sim.publish(part, message.MutableMessage{Key: e.Key(), Payload: e.Append(nil)})
	}
	for _, name := range SourceTopics {
		for p := range sim.topics[name] {
			sim.publish(topic.Partition{Topic: name, Index: p}, windows.Mark{Sender: 0, Senders: 1, Time: windows.MaxTime}.Message())
		}
	}
	for {
		var ready []*winShard
		for _, s := range sim.shards {
			if s.pending() {
				ready = append(ready, s)
			}
		}
		if len(ready) == 0 {
			break
		}
		ready[sim.rng.IntN(len(ready))].txn(1 + sim.rng.IntN(6))
	}
	var rows []string
	for p, log := range sim.topics[out] {
		part, ended, senders := splitOutput(sim.t, fmt.Sprintf("%s/%d", out, p), log)
		rows = append(rows, part...)
		if senders == 0 || ended != senders {
			sim.t.Fatalf("%s/%d: %d of %d senders ended", out, p, ended, senders)
		}
	}
	return rows
}

// winShard is a shard of the simulation: a fakeShard over a RocksDB of its
// own, the consumer of its app, and its offsets.
type winShard struct {
	*fakeShard
	t       testing.TB
	sim     *winSim
	app     shard.App
	cons    shard.Consumer
	offsets []int // per source, the next message's index
}

func newWinShard(t testing.TB, sim *winSim, app shard.App, spec *shard.Spec, part int) *winShard {
	t.Helper()
	s := &winShard{fakeShard: newDBShard(t, spec, part), t: t, sim: sim, app: app, offsets: make([]int, len(spec.Sources))}
	s.promote()
	return s
}

// promote makes a fresh consumer primary, as a new primary does.
func (s *winShard) promote() {
	s.wb.Clear()
	s.cache = nil
	s.cons = s.app.NewConsumer()
	if in, ok := s.cons.(shard.ShardIniter); ok {
		if err := in.InitShard(s); err != nil {
			s.t.Fatal(err)
		}
	}
}

func (s *winShard) pending() bool {
	for i, src := range s.spec.Sources {
		if s.offsets[i] < len(s.sim.topics[src.Topic][src.Partition]) {
			return true
		}
	}
	return false
}

// txn runs one transaction of up to n messages, taken from random sources.
func (s *winShard) txn(n int) {
	s.t.Helper()
	offs := slices.Clone(s.offsets)
	pub := s.sim.pub()
	for k := 0; k < n; k++ {
		var avail []int
		for i, src := range s.spec.Sources {
			if offs[i] < len(s.sim.topics[src.Topic][src.Partition]) {
				avail = append(avail, i)
			}
		}
		if len(avail) == 0 {
			break
		}
		i := avail[s.sim.rng.IntN(len(avail))]
		src := s.spec.Sources[i]
		m := s.sim.topics[src.Topic][src.Partition][offs[i]]
		offs[i]++
		env := topic.Envelope{Partition: topic.Partition{Topic: src.Topic, Index: src.Partition}, Message: m}
		if err := s.cons.Consume(s, env, pub); err != nil {
			s.t.Fatalf("%s: consume: %v", s.spec.ID, err)
		}
	}
	if err := s.cons.Flush(s, pub); err != nil {
		s.t.Fatalf("%s: flush: %v", s.spec.ID, err)
	}
	if s.sim.crash && s.sim.rng.IntN(5) == 0 {
		s.promote() // lost before its commit
		return
	}
	s.commit(s.t)
	s.offsets = offs
	for _, st := range pub.staged {
		s.sim.publish(st.part, st.msg)
	}
	if s.sim.crash && s.sim.rng.IntN(5) == 0 {
		s.promote()
	}
}

// stateKeys counts the keys outside the runner's prefixes.
func (s *winShard) stateKeys() int {
	n := 0
	s.scan(func(k, _ []byte) {
		if !bytes.HasPrefix(k, trackerPrefix) && !bytes.HasPrefix(k, timersPrefix) {
			n++
		}
	})
	return n
}

// parseWinBids parses one bid a line: "bid auction=A t=T [price=P]
// [bidder=B] [extra=X]" (price and bidder default to 1). Lines are events in
// publishing order, so per partition t must not decrease.
func parseWinBids(t *testing.T, input string) []Event {
	t.Helper()
	var evs []Event
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] != "bid" {
			t.Fatalf("line %q: want bid", line)
		}
		e := Event{Kind: KindBid, Bid: Bid{Price: 1, Bidder: 1}}
		seen := map[string]bool{}
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("line %q: %q is not key=value", line, kv)
			}
			seen[k] = true
			if k == "extra" {
				e.Bid.Extra = v
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("line %q: %s: %v", line, k, err)
			}
			switch k {
			case "auction":
				e.Bid.Auction = n
			case "t":
				e.Bid.DateTime = n
			case "price":
				e.Bid.Price = n
			case "bidder":
				e.Bid.Bidder = n
			default:
				t.Fatalf("line %q: unknown field %q", line, k)
			}
		}
		if !seen["auction"] || !seen["t"] {
			t.Fatalf("line %q: auction and t are required", line)
		}
		evs = append(evs, e)
	}
	return evs
}

// runWinTest is the datadriven test of q5 and q7: "run" prints the model's
// rows over the bids, sorted, and checks that the query's app computes the
// same under several partition counts, transaction orders and crashes.
func runWinTest(t *testing.T, d *datadriven.TestData) string {
	q, ok := Lookup(d.Cmd)
	if !ok {
		t.Fatalf("unknown query %q", d.Cmd)
	}
	evs := parseWinBids(t, d.Input)
	want := q.Model(slices.Values(eventPtrs(evs)))
	slices.Sort(want)
	for _, parts := range []int{1, 2, 3} {
		for seed := uint64(0); seed < 4; seed++ {
			crash := seed%2 == 1
			got := newWinSim(t, q, parts, seed, crash).run(evs, q.Output)
			if diff := Diff(got, want); diff != "" {
				return fmt.Sprintf("app (partitions=%d seed=%d crash=%v) differs from the model: %s\n", parts, seed, crash, diff)
			}
		}
	}
	if len(want) == 0 {
		return "(no rows)\n"
	}
	return strings.Join(want, "\n") + "\n"
}

func eventPtrs(evs []Event) []*Event {
	out := make([]*Event, len(evs))
	for i := range evs {
		out[i] = &evs[i]
	}
	return out
}

// TestPeekBid checks peekBid against the full decoding on generated bids.
func TestPeekBid(t *testing.T) {
	g, err := NewGenerator(7, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var e, d Event
	for n := uint64(0); n < 2000; n++ {
		g.Event(n, &e)
		enc := e.Append(nil)
		a, p, ts, err := peekBid(enc)
		if e.Kind != KindBid {
			if err == nil {
				t.Fatalf("event %d: peekBid of a %s: no error", n, e.Kind)
			}
			continue
		}
		if err != nil {
			t.Fatalf("event %d: %v", n, err)
		}
		if err := d.Decode(enc); err != nil {
			t.Fatal(err)
		}
		if a != d.Bid.Auction || p != d.Bid.Price || ts != d.Bid.DateTime {
			t.Fatalf("event %d: peekBid = %d, %d, %d; want %d, %d, %d", n, a, p, ts, d.Bid.Auction, d.Bid.Price, d.Bid.DateTime)
		}
		// peekBid reads everything up to the extra field.
		head := len(enc) - len(appendStrings(nil, d.Bid.Extra))
		for cut := 0; cut < head; cut++ {
			if _, _, _, err := peekBid(enc[:cut]); err == nil {
				t.Fatalf("event %d: peekBid of %d of %d bytes: no error", n, cut, len(enc))
			}
		}
	}
}

// TestQ5Q7Sim runs q5 and q7 in the simulation, with crashes, over generated
// events (at 100 events/s: 40 s, several windows) and over random bids of few
// auctions and prices, so that ties at the maximum abound; each output must
// equal the model.
func TestQ5Q7Sim(t *testing.T) {
	g, err := NewGenerator(3, 100)
	if err != nil {
		t.Fatal(err)
	}
	var generated []Event
	for e := range g.Events(4000) {
		if e.Kind == KindBid {
			generated = append(generated, *e)
		}
	}
	rng := rand.New(rand.NewPCG(5, 7))
	var random []Event
	for ts := int64(0); ts < 60000; ts += rng.Int64N(400) {
		random = append(random, Event{Kind: KindBid, Bid: Bid{
			Auction: 1 + rng.Int64N(6), Price: 1 + rng.Int64N(4), Bidder: rng.Int64N(100),
			DateTime: ts, Extra: strconv.FormatInt(ts, 36),
		}})
	}
	for _, set := range []struct {
		name string
		evs  []Event
	}{{"generated", generated}, {"random", random}} {
		for _, name := range []string{"q5", "q7"} {
			q, _ := Lookup(name)
			want := q.Model(slices.Values(eventPtrs(set.evs)))
			for seed := uint64(0); seed < 2; seed++ {
				got := newWinSim(t, q, 2+int(seed), seed, true).run(set.evs, q.Output)
				if diff := Diff(got, want); diff != "" {
					t.Errorf("%s, %s bids, seed %d: %s", name, set.name, seed, diff)
				}
			}
			t.Logf("%s, %d %s bids: %d rows", name, len(set.evs), set.name, len(want))
		}
	}
}
