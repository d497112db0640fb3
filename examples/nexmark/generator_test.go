package nexmark

import (
	"bytes"
	"errors"
	"testing"
)

// TestGeneratorDeterministic: event n is a function of (seed, rate, n)
// only — generated in any order, by any generator value — and the seed
// changes it.
func TestGeneratorDeterministic(t *testing.T) {
	g, err := NewGenerator(7, DefaultRate)
	if err != nil {
		t.Fatal(err)
	}
	var fwd [][]byte
	var e Event
	for n := uint64(0); n < 500; n++ {
		g.Event(n, &e)
		fwd = append(fwd, e.Append(nil))
	}
	g2 := Generator{Seed: 7, Rate: DefaultRate, BaseTime: BaseTime}
	for n := uint64(499); ; n-- {
		g2.Event(n, &e)
		if !bytes.Equal(e.Append(nil), fwd[n]) {
			t.Fatalf("event %d differs when generated backwards", n)
		}
		if n == 0 {
			break
		}
	}
	other := Generator{Seed: 8, Rate: DefaultRate, BaseTime: BaseTime}
	same := 0
	for n := uint64(0); n < 500; n++ {
		other.Event(n, &e)
		if bytes.Equal(e.Append(nil), fwd[n]) {
			same++
		}
	}
	if same > 0 {
		t.Fatalf("%d of 500 events equal under another seed", same)
	}
}

// TestGeneratorShape checks the documented constants over 100 k events: the
// 1:3:46 mix, first ids, ids per kind, categories, average sizes within the
// reference's ±20 %, hot auctions and bidders, and times spaced by the rate.
func TestGeneratorShape(t *testing.T) {
	g, _ := NewGenerator(1, 1000)
	const n = 100_000
	count := map[Kind]int{}
	size := map[Kind]int{}
	hotAuction, hotBidder := 0, 0
	var e Event
	var lastPerson, lastAuction int64 = FirstPersonID - 1, FirstAuctionID - 1
	for i := uint64(0); i < n; i++ {
		g.Event(i, &e)
		count[e.Kind]++
		size[e.Kind] += len(e.Append(nil))
		if want := g.BaseTime + int64(i); e.Time() != want { // 1000/s: 1 ms apart
			t.Fatalf("event %d at %d, want %d", i, e.Time(), want)
		}
		switch e.Kind {
		case KindPerson:
			if e.Person.ID != lastPerson+1 {
				t.Fatalf("event %d: person %d after %d", i, e.Person.ID, lastPerson)
			}
			lastPerson = e.Person.ID
		case KindAuction:
			a := e.Auction
			if a.ID != lastAuction+1 {
				t.Fatalf("event %d: auction %d after %d", i, a.ID, lastAuction)
			}
			lastAuction = a.ID
			if a.Category < FirstCategoryID || a.Category >= FirstCategoryID+NumCategories {
				t.Fatalf("auction %d: category %d", a.ID, a.Category)
			}
			if a.Expires <= a.DateTime || a.Reserve < a.InitialBid {
				t.Fatalf("auction %+v: expires or reserve out of range", a)
			}
		case KindBid:
			b := e.Bid
			if b.Auction%100 == 0 {
				hotAuction++
			}
			if b.Bidder%100 == 1 {
				hotBidder++
			}
			if b.Auction > lastAuction+auctionIDLead || b.Auction < FirstAuctionID {
				t.Fatalf("bid on auction %d, last auction %d", b.Auction, lastAuction)
			}
			if b.Price < 100 || b.Price > 100_000_000 {
				t.Fatalf("bid price %d", b.Price)
			}
		}
	}
	if count[KindPerson] != n/50 || count[KindAuction] != 3*n/50 || count[KindBid] != 46*n/50 {
		t.Fatalf("mix %v, want 1:3:46 of %d", count, n)
	}
	for k, avg := range map[Kind]int{KindPerson: avgPersonBytes, KindAuction: avgAuctionBytes, KindBid: avgBidBytes} {
		got := size[k] / count[k]
		if got < avg*8/10 || got > avg*12/10 {
			t.Errorf("%s: average size %d bytes, want %d ± 20%%", k, got, avg)
		}
	}
	// P(hot) = 1 - 1/ratio, plus the draws that land on a hot id anyway.
	if f := float64(hotAuction) / float64(count[KindBid]); f < 0.45 || f > 0.6 {
		t.Errorf("hot auction share %.2f, want about 0.5", f)
	}
	if f := float64(hotBidder) / float64(count[KindBid]); f < 0.7 || f > 0.8 {
		t.Errorf("hot bidder share %.2f, want about 0.75", f)
	}
}

// TestEventRoundTrip: Decode and DecodeView invert Append, and damaged
// payloads are errors naming the problem.
func TestEventRoundTrip(t *testing.T) {
	g, _ := NewGenerator(3, DefaultRate)
	var e, d Event
	for n := uint64(0); n < 200; n++ {
		g.Event(n, &e)
		b := e.Append(nil)
		if err := d.Decode(b); err != nil {
			t.Fatalf("event %d: %v", n, err)
		}
		if d != e {
			t.Fatalf("event %d: decoded %+v, want %+v", n, d, e)
		}
		var v Event
		if err := v.DecodeView(b); err != nil || v != e {
			t.Fatalf("event %d: viewed %+v (%v), want %+v", n, v, err, e)
		}
		if err := d.Decode(b[:len(b)-1]); !errors.Is(err, ErrBadEvent) {
			t.Fatalf("event %d truncated: %v", n, err)
		}
		if err := v.DecodeView(b[:len(b)-1]); !errors.Is(err, ErrBadEvent) {
			t.Fatalf("event %d truncated, viewed: %v", n, err)
		}
	}
	for _, bad := range [][]byte{nil, []byte("X"), append(e.Append(nil), 0)} {
		if err := d.Decode(bad); !errors.Is(err, ErrBadEvent) {
			t.Errorf("Decode(%q) = %v, want ErrBadEvent", bad, err)
		}
	}
}
