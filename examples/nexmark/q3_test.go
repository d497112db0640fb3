package nexmark

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/windows"
)

// The tests of q3 and q8 (the seller joins) share a datadriven format and a
// driver that runs a join's logic without a cluster.
//
// A test's input is a list of lines, each an event or a watermark:
//
//	P id=1 name=Ann city=Bend state=OR t=0   a person
//	A id=5 seller=1 cat=10 t=100             an auction
//	wm t=9999                                the join's watermark reaches t
//
// "run" prints the model's rows, sorted, then the final state of the app's
// join stage (key counts per prefix). It checks that the app, fed the lines
// in their order, reversed, and shuffled (events move only between
// watermarks), outputs the model's rows, and ends in the same state.

func TestQ3Model(t *testing.T) { datadriven.RunTest(t, "testdata/q3", runJoinTest) }

// TestQ3Generated runs the logic over generated events in shuffled orders.
func TestQ3Generated(t *testing.T) { testJoinGenerated(t, "q3", 20000) }

// joinLine is one line of a join test: an event, or a watermark (wm true).
type joinLine struct {
	ev Event
	wm bool
	t  int64
}

func parseJoinLines(t *testing.T, input string) []joinLine {
	t.Helper()
	var out []joinLine
	for _, l := range strings.Split(strings.TrimSpace(input), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		args := map[string]string{}
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("%q: want key=value, not %q", l, kv)
			}
			args[k] = v
		}
		num := func(k string) int64 {
			v, ok := args[k]
			if !ok && k == "cat" {
				return 0
			}
			if !ok {
				t.Fatalf("%q: no %s=", l, k)
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%q: %s: %v", l, k, err)
			}
			return n
		}
		var jl joinLine
		switch f[0] {
		case "P":
			jl.ev = Event{Kind: KindPerson, Person: Person{ID: num("id"), Name: args["name"], City: args["city"], State: args["state"], DateTime: num("t")}}
		case "A":
			jl.ev = Event{Kind: KindAuction, Auction: Auction{ID: num("id"), Seller: num("seller"), Category: num("cat"), DateTime: num("t")}}
		case "wm":
			jl = joinLine{wm: true, t: num("t")}
		default:
			t.Fatalf("%q: unknown line (want P, A or wm)", l)
		}
		out = append(out, jl)
	}
	return out
}

func runJoinTest(t *testing.T, d *datadriven.TestData) string {
	if d.Cmd != "run" {
		t.Fatalf("unknown command %q", d.Cmd)
	}
	var name string
	d.ScanArgs(t, "q", &name)
	q, ok := Lookup(name)
	if !ok {
		t.Fatalf("no query %q", name)
	}
	lines := parseJoinLines(t, d.Input)
	want := q.Model(func(yield func(*Event) bool) {
		for i := range lines {
			if !lines[i].wm && !yield(&lines[i].ev) {
				return
			}
		}
	})
	slices.Sort(want)
	state := checkJoinOrders(t, name, lines, want, 20)
	var b strings.Builder
	for _, r := range want {
		b.WriteString(r + "\n")
	}
	if len(want) == 0 {
		b.WriteString("no rows\n")
	}
	fmt.Fprintf(&b, "state: %s\n", state)
	return b.String()
}

// checkJoinOrders runs query name's logic over lines in their order,
// reversed, and shuffled n times (between watermarks), checking every run
// outputs want and ends in the same state; it returns that state.
func checkJoinOrders(t *testing.T, name string, lines []joinLine, want []string, n int) string {
	t.Helper()
	rnd := rand.New(rand.NewPCG(1, uint64(len(lines))))
	var state string
	for i := -2; i < n; i++ {
		order := slices.Clone(lines)
		what := "in order"
		switch i {
		case -2:
		case -1:
			what = "reversed"
			shuffleJoinLines(order, func(seg []joinLine) { slices.Reverse(seg) })
		default:
			what = fmt.Sprintf("shuffle %d", i)
			shuffleJoinLines(order, func(seg []joinLine) {
				rnd.Shuffle(len(seg), func(i, j int) { seg[i], seg[j] = seg[j], seg[i] })
			})
		}
		got, st := runJoinLogic(t, name, order)
		if d := Diff(got, want); d != "" {
			t.Errorf("%s, events %s: app differs from the model: %s", name, what, d)
		}
		if i == -2 {
			state = st
		} else if st != state {
			t.Errorf("%s, events %s: final state %s, in order %s", name, what, st, state)
		}
	}
	return state
}

// shuffleJoinLines applies f to each run of events between watermarks.
func shuffleJoinLines(lines []joinLine, f func(seg []joinLine)) {
	start := 0
	for i := 0; i <= len(lines); i++ {
		if i == len(lines) || lines[i].wm {
			f(lines[start:i])
			start = i + 1
		}
	}
}

// runJoinLogic runs the re-key and join logic of query name (q3 or q8) over
// lines, each event in a transaction of its own, then fires every timer
// (end of input). It returns the rows and the join's final state.
func runJoinLogic(t *testing.T, name string, lines []joinLine) (rows []string, state string) {
	t.Helper()
	var rk *rekey
	var join logic
	var bySeller string
	switch name {
	case "q3":
		rk, join, bySeller = &rekey{out: q3BySeller, keep: q3Auction}, &q3Join{}, q3BySeller
	case "q8":
		rk, join, bySeller = &rekey{out: q8BySeller}, &q8Join{}, q8BySeller
	default:
		t.Fatalf("no join logic for %q", name)
	}
	js, rs := newMemShard(t), newMemShard(t)
	pub := &fakePub{parts: onePartition}
	c := &stageCtx{s: js, pub: pub, timers: windows.NewTimers(timersPrefix)}
	rc := &stageCtx{s: rs, pub: pub}
	consume := func(lc *stageCtx, l logic, tp string, ev *Event) {
		t.Helper()
		env := topic.Envelope{Partition: topic.Partition{Topic: tp}, Message: message.ImmutableMessage{Key: ev.Key(), Payload: ev.Append(nil)}}
		if _, err := l.consume(lc, env); err != nil {
			t.Fatalf("%s: consume %+v: %v", name, *ev, err)
		}
	}
	due := func(wm int64) {
		t.Helper()
		c.wm = wm
		if err := c.timers.Due(js.Transaction(), wm, func(at int64, key []byte) error { return join.fire(c, at, key) }); err != nil {
			t.Fatalf("%s: fire at watermark %d: %v", name, wm, err)
		}
		js.commit(t)
	}
	for i := range lines {
		l := &lines[i]
		switch {
		case l.wm:
			due(l.t)
		case l.ev.Kind == KindPerson:
			consume(c, join, TopicPerson, &l.ev)
			js.commit(t)
		default:
			consume(rc, rk, TopicAuction, &l.ev)
			rs.commit(t)
			msgs := pub.take(bySeller)
			for _, m := range msgs {
				var ev Event
				if err := ev.Decode(m.Payload); err != nil {
					t.Fatal(err)
				}
				if m.Key != strconv.FormatInt(ev.Auction.Seller, 10) {
					t.Fatalf("%s: re-keyed auction %d with key %q, not its seller %d", name, ev.Auction.ID, m.Key, ev.Auction.Seller)
				}
				consume(c, join, bySeller, &ev)
				js.commit(t)
			}
		}
	}
	due(windows.MaxTime)
	if c.timers.Len() != 0 {
		t.Errorf("%s: %d timers left after the end of input", name, c.timers.Len())
	}
	for _, m := range pub.take("nexmark-" + name) {
		rows = append(rows, string(m.Payload))
	}
	if len(pub.staged) > 0 {
		t.Errorf("%s: published to unexpected topics: %v", name, pub.topics())
	}
	return rows, js.summary()
}

// testJoinGenerated runs query name's logic over n generated events, in
// their order and shuffled (keeping each event before a watermark that
// passes it, as the stage runner does), and compares with the model.
func testJoinGenerated(t *testing.T, name string, n uint64) {
	q, _ := Lookup(name)
	g, err := NewGenerator(7, testRate)
	if err != nil {
		t.Fatal(err)
	}
	want := q.Model(g.Events(n))
	if len(want) == 0 {
		t.Fatalf("%s: the model has no rows for %d events", name, n)
	}
	var lines []joinLine
	next := g.Timestamp(0) + 5000 // a watermark every 5 s, 4 s behind
	for e := range g.Events(n) {
		if e.Kind == KindBid {
			continue
		}
		if e.Time() >= next {
			lines = append(lines, joinLine{wm: true, t: next - 4000})
			next += 5000
		}
		lines = append(lines, joinLine{ev: *e})
	}
	slices.Sort(want)
	checkJoinOrders(t, name, lines, want, 2)
	t.Logf("%s: %d rows from %d events", name, len(want), n)
}
