package nexmark

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"time"
)

// The generator's constants: those of the reference generators (Beam's
// GeneratorConfig and its model generators; VV's nexmark-flink matches them).
const (
	FirstPersonID   = 1000
	FirstAuctionID  = 1000
	FirstCategoryID = 10
	NumCategories   = 5

	// Proportions of a block of 50 events: 1 person, 3 auctions, 46 bids.
	personProportion  = 1
	auctionProportion = 3
	bidProportion     = 46
	totalProportion   = personProportion + auctionProportion + bidProportion

	numActivePeople     = 1000 // a random person is one of the last 1000 ...
	personIDLead        = 10   // ... or of the next 10
	numInFlightAuctions = 100  // a random auction is one of the last 100 ...
	auctionIDLead       = 10   // ... or of the next 10

	// Hot keys: P(hot) = 1 - 1/ratio.
	hotAuctionRatio = 2
	hotBidderRatio  = 4
	hotSellerRatio  = 4
	hotAuctionStep  = 100 // the hot auction is the last multiple of 100 ...
	hotPersonStep   = 100 // ... and so are the hot seller and bidder (+1)

	avgPersonBytes  = 200
	avgAuctionBytes = 500
	avgBidBytes     = 100

	hotChannelRatio = 2
	numChannels     = 10000
)

// BaseTime is the event time of event 0 unless Generator.BaseTime says
// otherwise: 2015-07-15T00:00:00Z, Beam's.
var BaseTime = time.Date(2015, 7, 15, 0, 0, 0, 0, time.UTC).UnixMilli()

// DefaultRate is the default event-time rate, events per second of event
// time: the reference runs' 10 M spans 100 M events over 10 s, so a run of a
// few million events here would fit one 10 s window; 100 K (the V2 guide's
// rate) makes the windowed queries close a window every 1 M events.
const DefaultRate = 100_000

var (
	firstNames = [...]string{"Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"}
	lastNames  = [...]string{"Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"}
	cities     = [...]string{"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"}
	states     = [...]string{"AZ", "CA", "ID", "OR", "WA", "WY"}
	hotChans   = [...]string{"Google", "Facebook", "Baidu", "Apple"}
)

// Generator makes Nexmark events. The value of event n depends only on
// (Seed, Rate, BaseTime, n): each event draws from its own PCG stream seeded
// with (Seed, n), as Beam seeds a java.util.Random per event id, so any
// process can regenerate any event, in any order. The zero value is not
// valid: use NewGenerator or set Rate.
type Generator struct {
	Seed uint64
	// Rate is events per second of event time; it spaces event times only
	// (events are produced as fast as asked for).
	Rate float64
	// BaseTime is event 0's time (ms since the Unix epoch).
	BaseTime int64
}

// NewGenerator returns a generator with the default base time.
func NewGenerator(seed uint64, rate float64) (Generator, error) {
	g := Generator{Seed: seed, Rate: rate, BaseTime: BaseTime}
	return g, g.Validate()
}

// Validate checks the generator's parameters.
func (g Generator) Validate() error {
	if !(g.Rate > 0) || math.IsInf(g.Rate, 0) || g.Rate > 1e9 {
		return fmt.Errorf("rate %v: must be a positive number of events per second, at most 1e9", g.Rate)
	}
	return nil
}

// Timestamp is event n's event time: BaseTime + n·(1e6/Rate) µs, in ms.
func (g Generator) Timestamp(n uint64) int64 {
	return g.BaseTime + int64(float64(n)*(1e6/g.Rate)/1000)
}

// KindOf is event n's kind: n mod 50 is 0 for a person, 1–3 for an
// auction, else a bid.
func KindOf(n uint64) Kind {
	switch off := n % totalProportion; {
	case off < personProportion:
		return KindPerson
	case off < personProportion+auctionProportion:
		return KindAuction
	}
	return KindBid
}

// Event fills e with event n.
func (g Generator) Event(n uint64, e *Event) {
	r := rng{}
	r.src.Seed(g.Seed, n)
	ts := g.Timestamp(n)
	*e = Event{Kind: KindOf(n)}
	switch e.Kind {
	case KindPerson:
		g.person(n, ts, &r, &e.Person)
	case KindAuction:
		g.auction(n, ts, &r, &e.Auction)
	default:
		g.bid(n, ts, &r, &e.Bid)
	}
}

// lastBase0PersonID is the (0-based) id of the last person generated at or
// before event n.
func lastBase0PersonID(n uint64) int64 {
	epoch, off := n/totalProportion, n%totalProportion
	if off >= personProportion {
		off = personProportion - 1
	}
	return int64(epoch*personProportion + off)
}

// lastBase0AuctionID is the (0-based) id of the last auction generated at
// or before event n (for an auction event: its own id).
func lastBase0AuctionID(n uint64) int64 {
	epoch, off := int64(n/totalProportion), int64(n%totalProportion)
	switch {
	case off < personProportion: // a person: the previous block's last auction
		epoch--
		off = auctionProportion - 1
	case off >= personProportion+auctionProportion: // a bid: this block's last
		off = auctionProportion - 1
	default:
		off -= personProportion
	}
	return epoch*auctionProportion + off
}

// nextBase0PersonID draws a recent person: one of the last numActivePeople,
// or of the personIDLead not yet generated.
func nextBase0PersonID(n uint64, r *rng) int64 {
	numPeople := lastBase0PersonID(n) + 1
	active := min(numPeople, numActivePeople)
	return numPeople - active + r.int63n(active+personIDLead)
}

// nextBase0AuctionID draws an in-flight auction, or one of the next
// auctionIDLead.
func nextBase0AuctionID(n uint64, r *rng) int64 {
	last := lastBase0AuctionID(n)
	lo := max(last-numInFlightAuctions, 0)
	return lo + r.int63n(last-lo+1+auctionIDLead)
}

func (g Generator) person(n uint64, ts int64, r *rng, p *Person) {
	p.ID = lastBase0PersonID(n) + FirstPersonID
	p.Name = firstNames[r.intn(len(firstNames))] + " " + lastNames[r.intn(len(lastNames))]
	p.Email = r.str(7) + "@" + r.str(5) + ".com"
	cc := make([]byte, 0, 19)
	for i := 0; i < 4; i++ {
		if i > 0 {
			cc = append(cc, ' ')
		}
		v := r.intn(10000)
		cc = append(cc, byte('0'+v/1000), byte('0'+v/100%10), byte('0'+v/10%10), byte('0'+v%10))
	}
	p.CreditCard = string(cc)
	p.City = cities[r.intn(len(cities))]
	p.State = states[r.intn(len(states))]
	p.DateTime = ts
	size := 8 + len(p.Name) + len(p.Email) + len(p.CreditCard) + len(p.City) + len(p.State) + 8
	p.Extra = r.extra(size, avgPersonBytes)
}

func (g Generator) auction(n uint64, ts int64, r *rng, a *Auction) {
	a.ID = lastBase0AuctionID(n) + FirstAuctionID
	if r.intn(hotSellerRatio) > 0 {
		a.Seller = (lastBase0PersonID(n) / hotPersonStep) * hotPersonStep
	} else {
		a.Seller = nextBase0PersonID(n, r)
	}
	a.Seller += FirstPersonID
	a.Category = FirstCategoryID + int64(r.intn(NumCategories))
	a.InitialBid = r.price()
	a.DateTime = ts
	// Auctions last up to twice the time until the event about
	// numInFlightAuctions auctions ahead, so about that many are open.
	horizon := g.Timestamp(n+numInFlightAuctions*totalProportion/auctionProportion) - ts
	a.Expires = ts + 1 + r.int63n(max(2*horizon, 1))
	a.ItemName = r.str(20)
	a.Description = r.str(100)
	a.Reserve = a.InitialBid + r.price()
	size := 8 + len(a.ItemName) + len(a.Description) + 8*6
	a.Extra = r.extra(size, avgAuctionBytes)
}

func (g Generator) bid(n uint64, ts int64, r *rng, b *Bid) {
	if r.intn(hotAuctionRatio) > 0 {
		b.Auction = (lastBase0AuctionID(n) / hotAuctionStep) * hotAuctionStep
	} else {
		b.Auction = nextBase0AuctionID(n, r)
	}
	b.Auction += FirstAuctionID
	if r.intn(hotBidderRatio) > 0 {
		b.Bidder = (lastBase0PersonID(n)/hotPersonStep)*hotPersonStep + 1
	} else {
		b.Bidder = nextBase0PersonID(n, r)
	}
	b.Bidder += FirstPersonID
	b.Price = r.price()
	url := "https://www.nexmark.com/" + r.strSep(5, '_') + "/" + r.strSep(5, '_') + "/item.htm?query=1"
	if r.intn(hotChannelRatio) > 0 {
		b.Channel = hotChans[r.intn(len(hotChans))]
	} else {
		ch := r.intn(numChannels)
		b.Channel = "channel-" + strconv.Itoa(ch)
		if r.intn(10) > 0 {
			url += "&channel_id=" + strconv.Itoa(ch)
		}
	}
	b.URL = url
	b.DateTime = ts
	size := 8*4 + len(b.Channel) + len(b.URL)
	b.Extra = r.extra(size, avgBidBytes)
}

// rng is one event's random stream.
type rng struct{ src rand.PCG }

// int63n is uniform in [0, n) for n > 0 (Lemire's multiply-shift; the bias
// of at most n/2^64 is far below anything a query sees).
func (r *rng) int63n(n int64) int64 {
	hi, _ := bits.Mul64(r.src.Uint64(), uint64(n))
	return int64(hi)
}

func (r *rng) intn(n int) int { return int(r.int63n(int64(n))) }

func (r *rng) float64() float64 { return float64(r.src.Uint64()>>11) / (1 << 53) }

// price is 10^(6U)·100, rounded: cents from $1 to $1 M, log-uniform.
func (r *rng) price() int64 { return int64(math.Round(math.Pow(10, r.float64()*6) * 100)) }

// str is 3 to maxLen-1 letters, with a space about one time in 13.
func (r *rng) str(maxLen int) string { return r.strSep(maxLen, ' ') }

func (r *rng) strSep(maxLen int, sep byte) string {
	n := 3 + r.intn(maxLen-3)
	b := make([]byte, n)
	for i := range b {
		if r.intn(13) == 0 {
			b[i] = sep
		} else {
			b[i] = byte('a' + r.intn(26))
		}
	}
	return string(b)
}

// extra pads an event of size bytes to avg ± 20 %.
func (r *rng) extra(size, avg int) string {
	if size > avg {
		return ""
	}
	avg -= size
	delta := int(math.Round(float64(avg) * 0.2))
	n := avg - delta
	if delta > 0 {
		n += r.intn(2 * delta)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + r.intn(26))
	}
	return string(b)
}
