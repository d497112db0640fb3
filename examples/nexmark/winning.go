package nexmark

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"

	"github.com/consumerd/consumerd/topic"
)

// Winning bids, as Beam's WinningBids: the join of auctions and bids on the
// auction id that keeps, per auction, its best bid among those with
//
//	A.DateTime <= B.DateTime <= A.Expires
//
// and yields it when the auction closes, once the watermark reaches
// A.Expires. An auction with no such bid yields nothing. The best bid is the
// first by (price desc, dateTime asc, bidder asc, extra asc): a total order
// (bids equal in all four make the same row), so the winner does not depend
// on the order the bids arrive in. q9 publishes every winner, q4 averages their prices.
//
// Auctions and bids are co-partitioned (both keyed by the auction id), so
// the join is one stage reading partition i of TopicAuction and TopicBid,
// both timed inputs: no re-keying. Auction ids are unique (the generator's
// are): a second auction of an id open in this primary's cache is ignored,
// but no read is spent looking further.
//
// Why the result is exact whatever the interleaving of the two topics rests
// on one lemma: on a timed input, an event with time t arrives before the
// shard's watermark W reaches t. Proof: the watermark of a timed partition is
// max(maxSeen - 4000 - 1, markTime), maxSeen the largest event time consumed
// there, and a mark (MaxTime) comes only after its last event; its events
// come in event-time order, so one not yet consumed has time t >= maxSeen >
// that watermark >= W (W is the minimum over the shard's inputs). So as long
// as it has not arrived, W < t; and timers fire only in Flush, after every
// message of the transaction was consumed. (It holds for any disorder within
// a partition of up to the 4 s delay.) Hence:
//
//  1. The close. Its timer fires at W >= A.Expires: every bid with
//     DateTime <= A.Expires has arrived on the bid partition by then, and
//     was applied — to the open auction, or to the pending bids the auction
//     took over when it arrived.
//  2. A bid whose auction has not arrived waits, with the auction's other
//     pending bids, under one key, with a timer at the smallest of their
//     DateTimes. When that timer fires (W >= its time) and the auction still
//     has not come, the auction, if it ever comes, arrives later on the
//     auction partition, so its DateTime > W: every pending bid with
//     DateTime <= W precedes it and can never qualify, and is dropped. The
//     others wait on, with a timer at their new least time.
//  3. A bid for an auction that closed here is dropped at once, without
//     creating state: the close happened in a Flush where W >= A.Expires,
//     and the bid arrived after it, so its DateTime > W >= A.Expires. The
//     join remembers the ids it closed (recentlyClosed, in memory only): a
//     bid for a closed id it forgot (after a failover, or one closed long
//     ago) is not told apart from one whose auction is yet to come, so it
//     waits as in 2 and is dropped when the watermark passes its time,
//     with the same result. So that memory changes how much state is
//     written, never the output.
//  4. Bids on an open auction outside its interval (before A.DateTime: a bid
//     for an id ahead of the generator's last auction, consumed after the
//     auction; or after A.Expires, consumed before the close fired) do not
//     qualify and are dropped.
//
// At end of input W becomes MaxTime, so every auction closes and every
// pending bid is dropped: the join yields, for each auction among the
// events, its best qualifying bid if it has one, as winningModel does.

// winBid is the part of a bid that the join keeps: q9's row needs the
// bidder and extra; q4 only the price (and the time, to test the interval).
type winBid struct {
	Price, DateTime, Bidder int64
	Extra                   string
}

// beats reports whether b ranks before o: a higher price, then an earlier
// time, then a smaller bidder, then a smaller extra.
func (b *winBid) beats(o *winBid) bool {
	switch {
	case b.Price != o.Price:
		return b.Price > o.Price
	case b.DateTime != o.DateTime:
		return b.DateTime < o.DateTime
	case b.Bidder != o.Bidder:
		return b.Bidder < o.Bidder
	}
	return b.Extra < o.Extra
}

// qualifies reports whether a bid at time t takes part in auction a.
func qualifies(a *Auction, t int64) bool { return a.DateTime <= t && t <= a.Expires }

// winner is an auction and its winning bid.
type winner struct {
	Auction Auction
	Bid     winBid
}

// winningModel is the join as an in-memory pass: every auction among the
// events that has a qualifying bid, with its best one, in no particular
// order (auction ids are unique; of duplicates it would keep the first).
func winningModel(events iter.Seq[*Event]) []winner {
	auctions := map[int64]*winner{}
	var order []*winner
	type bid struct {
		auction int64
		b       winBid
	}
	var bids []bid
	for e := range events {
		switch e.Kind {
		case KindAuction:
			if _, ok := auctions[e.Auction.ID]; !ok {
				w := &winner{Auction: e.Auction}
				auctions[e.Auction.ID] = w
				order = append(order, w)
			}
		case KindBid:
			b := &e.Bid
			bids = append(bids, bid{b.Auction, winBid{Price: b.Price, DateTime: b.DateTime, Bidder: b.Bidder, Extra: b.Extra}})
		}
	}
	has := map[*winner]bool{}
	for i := range bids {
		b := &bids[i]
		w := auctions[b.auction]
		if w == nil || !qualifies(&w.Auction, b.b.DateTime) {
			continue
		}
		if !has[w] || b.b.beats(&w.Bid) {
			w.Bid, has[w] = b.b, true
		}
	}
	var out []winner
	for _, w := range order {
		if has[w] {
			out = append(out, *w)
		}
	}
	return out
}

// The join's state, point lookups only (a stage's own database; the ids are
// 8 bytes big-endian):
//
//	"win/a/" + id → the open auction (openAuction.append): its interval, the
//	                query's detail of it, and its best bid so far
//	"win/p/" + id → the pending bids of an auction not arrived: the time of
//	                their timer (the least DateTime), then the bids
//
// Timers, keys kind + id: 'c' at A.Expires closes the auction; 'p' at the
// least pending DateTime drops the pending bids the watermark passed.
var (
	winOpenPrefix    = []byte("win/a/")
	winPendingPrefix = []byte("win/p/")
)

const (
	winTimerClose   = 'c'
	winTimerPending = 'p'
)

// winningJoin is the join's logic; a query gives it what to keep of an
// auction and what to do with a winner.
type winningJoin struct {
	// name is the stage's, for errors.
	name string
	// full keeps each bid's bidder and extra (q9); otherwise only its
	// price and time (q4: the final price is all it needs, and the best
	// price does not depend on the tie-breaks).
	full bool
	// detail appends what the query needs of an auction at its close;
	// payload is the auction's event encoding.
	detail func(dst []byte, a *Auction, payload []byte) []byte
	// emit handles a closed auction's winner (detail is detail's output).
	emit func(c *stageCtx, id, expires int64, detail []byte, best *winBid) error

	// open caches the open auctions this primary read or wrote: each is
	// written through to the transaction when it changes, so it always
	// equals what s.Get would return. Most bids hit it and cost no read.
	open   map[int64]*openAuction
	closed recentlyClosed

	key, val, tkey []byte
	pend           []winBid
}

// openAuction is an open auction's state.
type openAuction struct {
	dateTime, expires int64
	detail            []byte
	hasBest           bool
	best              winBid
}

func newWinningJoin(name string, full bool,
	detail func(dst []byte, a *Auction, payload []byte) []byte,
	emit func(c *stageCtx, id, expires int64, detail []byte, best *winBid) error) *winningJoin {
	return &winningJoin{name: name, full: full, detail: detail, emit: emit, open: map[int64]*openAuction{}}
}

// recentlyClosed remembers the last recentlyClosedLen auction ids the join
// closed (see 3 above); it is memory only and may forget.
type recentlyClosed struct {
	ids  map[int64]struct{}
	ring []int64
	next int
}

// recentlyClosedLen is how many closed ids the join remembers: in the
// generator a bid names one of the last 100 auctions (or the hot one, the
// last multiple of 100), so a few thousand cover every bid for a closed
// auction, at any rate.
const recentlyClosedLen = 4096

func (r *recentlyClosed) add(id int64) {
	if r.ids == nil {
		r.ids = make(map[int64]struct{}, recentlyClosedLen)
		r.ring = make([]int64, 0, recentlyClosedLen)
	}
	if len(r.ring) < recentlyClosedLen {
		r.ring = append(r.ring, id)
	} else {
		delete(r.ids, r.ring[r.next])
		r.ring[r.next] = id
		r.next = (r.next + 1) % recentlyClosedLen
	}
	r.ids[id] = struct{}{}
}

func (r *recentlyClosed) has(id int64) bool {
	_, ok := r.ids[id]
	return ok
}

func winKey(dst, prefix []byte, id int64) []byte {
	return binary.BigEndian.AppendUint64(append(dst[:0], prefix...), uint64(id))
}

func winTimerKey(dst []byte, kind byte, id int64) []byte {
	return binary.BigEndian.AppendUint64(append(dst[:0], kind), uint64(id))
}

func (j *winningJoin) consume(c *stageCtx, env topic.Envelope) (int64, error) {
	if err := c.ev.Decode(env.Message.Payload); err != nil {
		return 0, err
	}
	switch {
	case c.ev.Kind == KindAuction && env.Partition.Topic == TopicAuction:
		return c.ev.Auction.DateTime, j.auction(c, &c.ev.Auction, env.Message.Payload)
	case c.ev.Kind == KindBid && env.Partition.Topic == TopicBid:
		return c.ev.Bid.DateTime, j.bid(c, &c.ev.Bid)
	}
	return 0, fmt.Errorf("%w: a %s on topic %s", ErrBadEvent, c.ev.Kind, env.Partition.Topic)
}

// auction opens an auction, applying the bids that waited for it.
func (j *winningJoin) auction(c *stageCtx, a *Auction, payload []byte) error {
	if j.open[a.ID] != nil {
		return nil // a duplicate id (see above); not looked for beyond the cache
	}
	oa := &openAuction{dateTime: a.DateTime, expires: a.Expires, detail: j.detail(nil, a, payload)}
	j.key = winKey(j.key, winPendingPrefix, a.ID)
	v, err := c.s.Get(j.key)
	if err != nil {
		return err
	}
	if v != nil {
		at, bids, err := j.decodePending(v)
		if err != nil {
			return fmt.Errorf("%s: pending bids of auction %d: %w", j.name, a.ID, err)
		}
		for i := range bids {
			if b := &bids[i]; qualifies(a, b.DateTime) && (!oa.hasBest || b.beats(&oa.best)) {
				oa.best, oa.hasBest = *b, true
			}
		}
		c.txn().Delete(j.key)
		j.tkey = winTimerKey(j.tkey, winTimerPending, a.ID)
		c.timers.Delete(c.txn(), at, j.tkey)
	}
	j.open[a.ID] = oa
	j.put(c, a.ID, oa)
	j.tkey = winTimerKey(j.tkey, winTimerClose, a.ID)
	c.timers.Set(c.txn(), a.Expires, j.tkey)
	return nil
}

// bid applies a bid to its open auction, drops it, or keeps it pending.
func (j *winningJoin) bid(c *stageCtx, b *Bid) error {
	oa, err := j.lookup(c, b.Auction)
	if err != nil {
		return err
	}
	if oa != nil {
		if b.DateTime < oa.dateTime || b.DateTime > oa.expires {
			return nil // 4 above
		}
		nb := j.keep(b)
		if oa.hasBest && !nb.beats(&oa.best) {
			return nil
		}
		oa.best, oa.hasBest = nb, true
		j.put(c, b.Auction, oa)
		return nil
	}
	if j.closed.has(b.Auction) {
		return nil // 3 above
	}
	// 2 above: the auction is yet to come (or closed and forgotten).
	j.key = winKey(j.key, winPendingPrefix, b.Auction)
	v, err := c.s.Get(j.key)
	if err != nil {
		return err
	}
	at := b.DateTime
	switch {
	case v == nil:
		j.val = binary.AppendVarint(j.val[:0], at)
	default:
		old, n := binary.Varint(v)
		if n <= 0 {
			return fmt.Errorf("%s: pending bids of auction %d: timer time: truncated or overlong varint", j.name, b.Auction)
		}
		if old <= at {
			at = old
			j.val = append(j.val[:0], v...)
			break
		}
		// An earlier bid than the timer's (not on a timed partition in
		// order, but cheap to handle): move the timer.
		j.tkey = winTimerKey(j.tkey, winTimerPending, b.Auction)
		c.timers.Delete(c.txn(), old, j.tkey)
		j.val = append(binary.AppendVarint(j.val[:0], at), v[n:]...)
	}
	nb := j.keep(b)
	j.val = j.appendBid(j.val, &nb)
	c.txn().Put(j.key, j.val)
	j.tkey = winTimerKey(j.tkey, winTimerPending, b.Auction)
	c.timers.Set(c.txn(), at, j.tkey)
	return nil
}

func (j *winningJoin) keep(b *Bid) winBid {
	if j.full {
		return winBid{Price: b.Price, DateTime: b.DateTime, Bidder: b.Bidder, Extra: b.Extra}
	}
	return winBid{Price: b.Price, DateTime: b.DateTime}
}

// lookup returns the open auction id, nil if it is not open here.
func (j *winningJoin) lookup(c *stageCtx, id int64) (*openAuction, error) {
	if oa := j.open[id]; oa != nil {
		return oa, nil
	}
	if j.closed.has(id) {
		return nil, nil
	}
	j.key = winKey(j.key, winOpenPrefix, id)
	v, err := c.s.Get(j.key)
	if err != nil || v == nil {
		return nil, err
	}
	oa, err := j.decodeOpen(v)
	if err != nil {
		return nil, fmt.Errorf("%s: open auction %d: %w", j.name, id, err)
	}
	j.open[id] = oa
	return oa, nil
}

func (j *winningJoin) put(c *stageCtx, id int64, oa *openAuction) {
	j.key = winKey(j.key, winOpenPrefix, id)
	j.val = j.appendOpen(j.val[:0], oa)
	c.txn().Put(j.key, j.val)
}

func (j *winningJoin) fire(c *stageCtx, at int64, key []byte) error {
	if len(key) != 9 {
		return fmt.Errorf("%s: timer key %x: want a kind byte and an 8-byte auction id", j.name, key)
	}
	id := int64(binary.BigEndian.Uint64(key[1:]))
	switch key[0] {
	case winTimerClose:
		return j.close(c, id)
	case winTimerPending:
		return j.expirePending(c, id)
	}
	return fmt.Errorf("%s: timer key %x: unknown kind %q", j.name, key, key[0])
}

// close ends an auction: its state goes, its winner (if any) goes out.
func (j *winningJoin) close(c *stageCtx, id int64) error {
	oa, err := j.lookup(c, id)
	if err != nil {
		return err
	}
	if oa == nil {
		return fmt.Errorf("%s: close of auction %d: no open auction of that id", j.name, id)
	}
	delete(j.open, id)
	j.key = winKey(j.key, winOpenPrefix, id)
	c.txn().Delete(j.key)
	j.closed.add(id)
	if !oa.hasBest {
		return nil
	}
	return j.emit(c, id, oa.expires, oa.detail, &oa.best)
}

// expirePending drops the pending bids of an auction not arrived that the
// watermark passed (2 above).
func (j *winningJoin) expirePending(c *stageCtx, id int64) error {
	j.key = winKey(j.key, winPendingPrefix, id)
	v, err := c.s.Get(j.key)
	if err != nil {
		return err
	}
	if v == nil {
		return fmt.Errorf("%s: pending timer of auction %d: no pending bids", j.name, id)
	}
	_, bids, err := j.decodePending(v)
	if err != nil {
		return fmt.Errorf("%s: pending bids of auction %d: %w", j.name, id, err)
	}
	kept := bids[:0]
	next := int64(0)
	for _, b := range bids {
		if b.DateTime > c.wm {
			if len(kept) == 0 || b.DateTime < next {
				next = b.DateTime
			}
			kept = append(kept, b)
		}
	}
	if len(kept) == 0 {
		c.txn().Delete(j.key)
		return nil
	}
	j.val = binary.AppendVarint(j.val[:0], next)
	for i := range kept {
		j.val = j.appendBid(j.val, &kept[i])
	}
	c.txn().Put(j.key, j.val)
	j.tkey = winTimerKey(j.tkey, winTimerPending, id)
	c.timers.Set(c.txn(), next, j.tkey)
	return nil
}

// Encodings. A bid: price, dateTime as varints, then (full) bidder and the
// extra's length and bytes. An open auction: dateTime, expires, the detail's
// length and bytes, a byte 1 if it has a best bid then that bid, else 0.

func (j *winningJoin) appendBid(dst []byte, b *winBid) []byte {
	dst = binary.AppendVarint(dst, b.Price)
	dst = binary.AppendVarint(dst, b.DateTime)
	if j.full {
		dst = binary.AppendVarint(dst, b.Bidder)
		dst = appendStrings(dst, b.Extra)
	}
	return dst
}

func (j *winningJoin) appendOpen(dst []byte, oa *openAuction) []byte {
	dst = binary.AppendVarint(dst, oa.dateTime)
	dst = binary.AppendVarint(dst, oa.expires)
	dst = binary.AppendUvarint(dst, uint64(len(oa.detail)))
	dst = append(dst, oa.detail...)
	if !oa.hasBest {
		return append(dst, 0)
	}
	return j.appendBid(append(dst, 1), &oa.best)
}

// fieldDecoder reads the varint fields of a value, naming the first one
// that does not decode.
type fieldDecoder struct {
	b   []byte
	err error
}

var errTruncated = errors.New("truncated or overlong varint")

func (d *fieldDecoder) int(name string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%s: %w", name, errTruncated)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *fieldDecoder) bytes(name string) []byte {
	if d.err != nil {
		return nil
	}
	l, n := binary.Uvarint(d.b)
	if n <= 0 || l > uint64(len(d.b)-n) {
		d.err = fmt.Errorf("%s: truncated length or bytes", name)
		return nil
	}
	v := d.b[n : n+int(l)]
	d.b = d.b[n+int(l):]
	return v
}

func (d *fieldDecoder) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	return d.err
}

func (j *winningJoin) decodeBid(d *fieldDecoder, b *winBid) {
	b.Price = d.int("bid price")
	b.DateTime = d.int("bid dateTime")
	if j.full {
		b.Bidder = d.int("bid bidder")
		b.Extra = string(d.bytes("bid extra"))
	}
}

func (j *winningJoin) decodeOpen(v []byte) (*openAuction, error) {
	d := fieldDecoder{b: v}
	oa := &openAuction{dateTime: d.int("dateTime"), expires: d.int("expires")}
	oa.detail = append([]byte(nil), d.bytes("detail")...)
	if d.err == nil {
		if len(d.b) == 0 {
			d.err = errors.New("best-bid flag: missing")
		} else {
			flag := d.b[0]
			d.b = d.b[1:]
			switch flag {
			case 0:
			case 1:
				oa.hasBest = true
				j.decodeBid(&d, &oa.best)
			default:
				d.err = fmt.Errorf("best-bid flag: %d, want 0 or 1", flag)
			}
		}
	}
	if err := d.end(); err != nil {
		return nil, fmt.Errorf("value %x: %w", v, err)
	}
	return oa, nil
}

// decodePending decodes a pending value into j.pend.
func (j *winningJoin) decodePending(v []byte) (at int64, bids []winBid, err error) {
	d := fieldDecoder{b: v}
	at = d.int("timer time")
	j.pend = j.pend[:0]
	for d.err == nil && len(d.b) > 0 {
		var b winBid
		j.decodeBid(&d, &b)
		j.pend = append(j.pend, b)
	}
	if err := d.end(); err != nil {
		return 0, nil, fmt.Errorf("value %x: %w", v, err)
	}
	if len(j.pend) == 0 {
		return 0, nil, fmt.Errorf("value %x: no bids", v)
	}
	return at, j.pend, nil
}
