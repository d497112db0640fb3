package nexmark

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/windows"
)

// TestWinning is the datadriven test of the winning-bids join, q4 and q9
// (testdata/winning): "run" prints the models' rows over hand-built events
// (q9's sorted, q4's in the order they are applied) and checks that both
// queries' apps compute the same in the simulation (q5q7sim_test.go's
// winSim), under several partition counts, transaction orders and crashes.
func TestWinning(t *testing.T) { datadriven.RunTest(t, "testdata/winning", runWinningTest) }

func runWinningTest(t *testing.T, d *datadriven.TestData) string {
	if d.Cmd != "run" {
		t.Fatalf("unknown command %q", d.Cmd)
	}
	evs := parseWinningEvents(t, d.Input)
	var b strings.Builder
	for _, name := range []string{"q9", "q4"} {
		q, ok := Lookup(name)
		if !ok {
			t.Fatalf("%s not registered", name)
		}
		want := q.Model(slices.Values(eventPtrs(evs)))
		for _, parts := range []int{1, 2, 3} {
			for seed := uint64(0); seed < 6; seed++ {
				crash := seed%2 == 1
				// A subtest each, so that its databases go when it ends.
				t.Run(fmt.Sprintf("%s/parts=%d/seed=%d", name, parts, seed), func(t *testing.T) {
					got := runWinningSim(t, q, parts, seed, crash, evs)
					if diff := Diff(got, want); diff != "" {
						fmt.Fprintf(&b, "%s app (partitions=%d seed=%d crash=%v) differs from the model: %s\n", name, parts, seed, crash, diff)
					}
				})
			}
		}
		if name == "q9" {
			slices.Sort(want)
		}
		for _, r := range want {
			fmt.Fprintf(&b, "%s %s\n", name, r)
		}
	}
	if b.Len() == 0 {
		return "(no rows)\n"
	}
	return b.String()
}

// parseWinningEvents parses one event a line, in publishing order (per
// partition, times must not decrease):
//
//	auction id=I t=T expires=E [cat=C] [seller=S] [name=N] [desc=D] [initial=P] [reserve=R] [extra=X]
//	bid auction=A t=T [price=P] [bidder=B] [extra=X]
//
// (cat defaults to 10, price and bidder to 1).
func parseWinningEvents(t *testing.T, input string) []Event {
	t.Helper()
	var evs []Event
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var e Event
		switch f[0] {
		case "auction":
			e = Event{Kind: KindAuction, Auction: Auction{Category: 10}}
		case "bid":
			e = Event{Kind: KindBid, Bid: Bid{Price: 1, Bidder: 1}}
		default:
			t.Fatalf("line %q: want auction or bid", line)
		}
		a, bd := &e.Auction, &e.Bid
		seen := map[string]bool{}
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("line %q: %q is not key=value", line, kv)
			}
			seen[k] = true
			strs := map[string]*string{"name": &a.ItemName, "desc": &a.Description, "extra": &a.Extra}
			if e.Kind == KindBid {
				strs = map[string]*string{"extra": &bd.Extra}
			}
			if p := strs[k]; p != nil {
				*p = v
				continue
			}
			ints := map[string]*int64{"id": &a.ID, "t": &a.DateTime, "expires": &a.Expires, "cat": &a.Category,
				"seller": &a.Seller, "initial": &a.InitialBid, "reserve": &a.Reserve}
			if e.Kind == KindBid {
				ints = map[string]*int64{"auction": &bd.Auction, "t": &bd.DateTime, "price": &bd.Price, "bidder": &bd.Bidder}
			}
			p := ints[k]
			if p == nil {
				t.Fatalf("line %q: unknown field %q", line, k)
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("line %q: %s: %v", line, k, err)
			}
			*p = n
		}
		required := []string{"auction", "t"}
		if e.Kind == KindAuction {
			required = []string{"id", "t", "expires"}
		}
		for _, k := range required {
			if !seen[k] {
				t.Fatalf("line %q: %s is required", line, k)
			}
		}
		evs = append(evs, e)
	}
	return evs
}

// runWinningSim runs q over evs in a winSim (winSim.runToEnd) and returns
// its output rows. Its check of the state left at the end is its own: none
// under the join's prefixes (every auction closed, every pending bid
// dropped), and under stage q4's only each category's count and sum, with no
// closing still buffered.
func runWinningSim(t *testing.T, q Query, parts int, seed uint64, crash bool, evs []Event) []string {
	t.Helper()
	sim := newWinSim(t, q, parts, seed, crash)
	rows := sim.runToEnd(evs, q.Output)
	for _, s := range sim.shards {
		s.scan(func(key, val []byte) {
			switch {
			case bytes.HasPrefix(key, trackerPrefix), bytes.HasPrefix(key, timersPrefix):
			case bytes.HasPrefix(key, q4CategoryPrefix):
				d := fieldDecoder{b: val}
				d.int("count")
				d.int("sum")
				if err := d.end(); err != nil {
					t.Errorf("%s: at the end, category state %x = %x: %v (closings still buffered?)", s.spec.ID, key, val, err)
				}
			default:
				t.Errorf("%s: at the end, state key %q = %x left", s.spec.ID, key, val)
			}
		})
	}
	return rows
}

// TestWinningGenerated runs q4 and q9 in the simulation, with crashes, over
// generated events: at 1000 events/s (TestQueriesEqualModels's rate) and at
// 100 000 events/s, where many events share a millisecond, so bids at their
// auction's own time, pending or not, abound.
func TestWinningGenerated(t *testing.T) {
	for _, rate := range []float64{1000, 100_000} {
		g, err := NewGenerator(11, rate)
		if err != nil {
			t.Fatal(err)
		}
		var evs []Event
		for e := range g.Events(6000) {
			evs = append(evs, *e)
		}
		for _, name := range []string{"q4", "q9"} {
			q, _ := Lookup(name)
			want := q.Model(slices.Values(eventPtrs(evs)))
			if len(want) < 50 {
				t.Fatalf("%s at rate %v: only %d rows in the model", name, rate, len(want))
			}
			for seed := uint64(0); seed < 2; seed++ {
				t.Run(fmt.Sprintf("%s/rate=%v/seed=%d", name, rate, seed), func(t *testing.T) {
					got := runWinningSim(t, q, 2+int(seed), seed, true, evs)
					if diff := Diff(got, want); diff != "" {
						t.Errorf("%s at rate %v, seed %d: %s", name, rate, seed, diff)
					}
				})
			}
			t.Logf("%s at rate %v: %d rows", name, rate, len(want))
		}
	}
}

// TestWinningLateBidNoState checks that a bid for an auction this primary
// closed writes nothing, and that after a failover (the memory of closed
// auctions lost) the same bid waits as pending and is dropped once the
// watermark passes it, with no output either way.
func TestWinningLateBidNoState(t *testing.T) {
	q, _ := Lookup("q9")
	sim := newWinSim(t, q, 1, 0, false)
	s := sim.shards[0]
	auctions := topic.Partition{Topic: TopicAuction}
	bids := topic.Partition{Topic: TopicBid}
	pub := sim.pub()
	var id message.MessageID
	feed := func(part topic.Partition, e Event) {
		t.Helper()
		id++
		env := topic.Envelope{Partition: part, Message: message.ImmutableMessage{Channel: part.Channel(), ID: id, Key: e.Key(), Payload: e.Append(nil)}}
		if err := s.cons.Consume(s, env, pub); err != nil {
			t.Fatal(err)
		}
	}
	flush := func() {
		t.Helper()
		if err := s.cons.Flush(s, pub); err != nil {
			t.Fatal(err)
		}
		s.commit(t)
	}
	feed(auctions, Event{Kind: KindAuction, Auction: Auction{ID: 1, DateTime: 1000, Expires: 2000}})
	feed(bids, Event{Kind: KindBid, Bid: Bid{Auction: 1, Price: 5, DateTime: 1500}})
	// Watermark 10000 - 4001 on both inputs: auction 1 closes.
	feed(auctions, Event{Kind: KindAuction, Auction: Auction{ID: 2, DateTime: 10000, Expires: 90000}})
	feed(bids, Event{Kind: KindBid, Bid: Bid{Auction: 2, Price: 1, DateTime: 10000}})
	flush()
	if rows := stagedRows(pub); len(rows) != 1 || !strings.HasPrefix(rows[0], "1|") {
		t.Fatalf("after the close: rows %q, want auction 1's", rows)
	}
	pub.staged = nil
	feed(bids, Event{Kind: KindBid, Bid: Bid{Auction: 1, Price: 99, DateTime: 10001}})
	if n := s.wb.Count(); n != 0 {
		t.Errorf("a bid for a closed auction wrote %d records", n)
	}
	flush()

	s.promote() // a new primary: it does not remember that auction 1 closed
	feed(bids, Event{Kind: KindBid, Bid: Bid{Auction: 1, Price: 99, DateTime: 10002}})
	if v, err := s.Get(winKey(nil, winPendingPrefix, 1)); err != nil || v == nil {
		t.Fatalf("after a failover, the bid for closed auction 1: pending %x, %v; want it pending", v, err)
	}
	feed(auctions, Event{Kind: KindAuction, Auction: Auction{ID: 3, DateTime: 20000, Expires: 90000}})
	feed(bids, Event{Kind: KindBid, Bid: Bid{Auction: 3, Price: 1, DateTime: 20000}})
	flush() // watermark 15999 passes 10002
	if v, err := s.Get(winKey(nil, winPendingPrefix, 1)); err != nil || v != nil {
		t.Fatalf("after the watermark passed it: pending %x, %v; want it dropped", v, err)
	}
	if rows := stagedRows(pub); len(rows) != 0 {
		t.Errorf("unexpected rows %q", rows)
	}
}

// stagedRows is the data messages (not marks) pub staged.
func stagedRows(pub *fakePub) []string {
	var rows []string
	for _, st := range pub.staged {
		if _, ok := st.msg.Properties[windows.MarkProperty]; !ok {
			rows = append(rows, string(st.msg.Payload))
		}
	}
	return rows
}

// TestQ4ClosingEncoding round-trips the q4-winning record and checks that
// each way of breaking it is an error naming what is wrong.
func TestQ4ClosingEncoding(t *testing.T) {
	cl := q4Closing{ID: 1234, Category: 12, Expires: 1436918400123, Price: 98765}
	enc := appendQ4Closing(nil, &cl)
	var got q4Closing
	if err := decodeQ4Closing(enc, &got); err != nil || got != cl {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, cl)
	}
	if len(enc) > 16 {
		t.Errorf("encoding is %d bytes, want at most 16", len(enc))
	}
	for _, tc := range []struct {
		b    []byte
		want string
	}{
		{nil, "auction id: truncated or overlong varint"},
		{enc[:2], "category: truncated or overlong varint"},
		{enc[:3], "expires: truncated or overlong varint"},
		{enc[:len(enc)-1], "final price: truncated or overlong varint"},
		{append(bytes.Clone(enc), 0), "1 trailing bytes"},
	} {
		err := decodeQ4Closing(tc.b, &got)
		if err == nil || !errors.Is(err, errBadQ4Closing) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("decode %x: %v; want a bad q4-winning record error with %q", tc.b, err, tc.want)
		}
	}
}
