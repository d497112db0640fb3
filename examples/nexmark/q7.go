package nexmark

import (
	"encoding/binary"
	"fmt"
	"iter"
	"strconv"

	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/windows"
)

// q7, highest bid: for every tumbling window of 10 s, every bid whose price
// is the window's maximum (every bid tied at it).
//
// Stage 1 (q7-max, one shard per bid partition) keeps per window its local
// maximum price and the bids at it; when the window closes it sends them to
// q7-candidates, keyed by the window's start, so every candidate of a window
// lands in one partition. Stage 2 (q7, the shard of that partition) keeps per
// window
// the largest price heard and the bids at it, and emits them when every
// stage-1 shard's mark passed the window.
const (
	q7Size       = 10_000
	q7Candidates = "q7-candidates"
	q7Output     = "nexmark-q7"
)

func init() {
	register(Query{
		Name:  "q7",
		Title: "highest bid: per 10 s tumbling window, the bids at its maximum price",
		Stages: []shard.App{
			stage{
				name: "q7-max", inputs: []string{TopicBid}, outputs: []string{q7Candidates},
				logic: func() logic { return &q7Local{wins: map[int64]*q7Win{}} },
			}.app(),
			stage{
				name: "q7", inputs: []string{q7Candidates}, marked: []string{q7Candidates}, outputs: []string{q7Output},
				logic: func() logic { return &q7Max{} },
			}.app(),
		},
		Topics: []TopicSpec{{Name: q7Candidates}, {Name: q7Output}},
		Output: q7Output,
		Model:  q7Model,
	})
}

// q7Row is a result row: auction|price|bidder|dateTime|extra.
func q7Row(r row, b *Bid) row {
	return r.int(b.Auction).int(b.Price).int(b.Bidder).int(b.DateTime).str(b.Extra)
}

// A window's maximum and the bids at it are one value (both stages' state,
// and stage 1's message after the window start): the price (varint), then
// per bid its auction, bidder and dateTime (varints) and extra (uvarint
// length and bytes): what q7Row needs.

// appendQ7Bid appends b's part of a window value.
func appendQ7Bid(dst []byte, b *Bid) []byte {
	dst = binary.AppendVarint(dst, b.Auction)
	dst = binary.AppendVarint(dst, b.Bidder)
	dst = binary.AppendVarint(dst, b.DateTime)
	return appendStrings(dst, b.Extra)
}

// q7Price is a window value's price, and the bids after it.
func q7Price(v []byte) (price int64, bids []byte, err error) {
	price, n := binary.Varint(v)
	if n <= 0 || n == len(v) {
		return 0, nil, fmt.Errorf("%w: q7 window value %x: want a price and bids", ErrBadEvent, v)
	}
	return price, v[n:], nil
}

// q7Bids calls fn with each bid of a window value's bids (b reused).
func q7Bids(price int64, bids []byte, b *Bid, fn func(*Bid) error) error {
	d := decoder{b: bids}
	for len(d.b) > 0 {
		*b = Bid{Price: price}
		b.Auction, b.Bidder, b.DateTime = d.int(), d.int(), d.int()
		b.Extra = d.str()
		if d.err != nil {
			return fmt.Errorf("%w: q7 bids %x: %v", ErrBadEvent, bids, d.err)
		}
		if err := fn(b); err != nil {
			return err
		}
	}
	return nil
}

// q7Local is stage 1's logic.
//
// State: "m/" + window start (8 bytes, big endian) → the window value. Timer:
// at the window's MaxTimestamp, empty key, set when the value is created.
type q7Local struct {
	// wins mirrors the values this primary wrote or read: most bids are
	// below their window's maximum and cost a map lookup, no write.
	wins map[int64]*q7Win
	// first is the event time of this primary's first bid: a window
	// starting after first+watermarkDelay has no value from an earlier
	// primary (see q5Count.first).
	first   int64
	started bool
	key     []byte
}

// q7Win is a window's value and its price.
type q7Win struct {
	price int64
	val   []byte
}

func (l *q7Local) consume(c *stageCtx, env topic.Envelope) (int64, error) {
	_, price, ts, err := peekBid(env.Message.Payload)
	if err != nil {
		return 0, fmt.Errorf("on topic %s: %w", env.Partition.Topic, err)
	}
	if !l.started {
		l.first, l.started = ts, true
	}
	w := windows.Tumble(ts, q7Size)
	st := l.wins[w.Start]
	l.key = appendWindowKey(l.key[:0], windowPrefix, w.Start)
	if st == nil && w.Start <= l.first+watermarkDelay {
		v, err := c.s.Get(l.key)
		if err != nil {
			return 0, err
		}
		if v != nil {
			p, _, err := q7Price(v)
			if err != nil {
				return 0, err
			}
			st = &q7Win{price: p, val: v}
			l.wins[w.Start] = st
		}
	}
	if st != nil && price < st.price {
		return ts, nil
	}
	if err := c.ev.Decode(env.Message.Payload); err != nil {
		return 0, err
	}
	txn := c.txn()
	if st == nil {
		st = &q7Win{}
		l.wins[w.Start] = st
		c.timers.Set(txn, w.MaxTimestamp(), nil)
	}
	if len(st.val) == 0 || price > st.price {
		st.price, st.val = price, binary.AppendVarint(st.val[:0], price)
	}
	st.val = appendQ7Bid(st.val, &c.ev.Bid)
	txn.Put(l.key, st.val)
	return ts, nil
}

func (l *q7Local) fire(c *stageCtx, at int64, _ []byte) error {
	start := at + 1 - q7Size
	l.key = appendWindowKey(l.key[:0], windowPrefix, start)
	var v []byte
	if st := l.wins[start]; st != nil {
		v = st.val
		delete(l.wins, start)
	} else {
		var err error
		if v, err = c.s.Get(l.key); err != nil {
			return err
		}
	}
	if _, _, err := q7Price(v); err != nil {
		return fmt.Errorf("q7-max: window %d: a timer but bad or no state: %w", start, err)
	}
	c.txn().Delete(l.key)
	c.buf = binary.AppendVarint(c.buf[:0], start)
	c.buf = append(c.buf, v...)
	return c.pub.Publish(q7Candidates, message.MutableMessage{Key: strconv.FormatInt(start, 10), Payload: c.buf})
}

// q7Max is stage 2's logic.
//
// State: "m/" + window start (8 bytes, big endian) → the window value of the
// largest price heard. Timer: at the window's MaxTimestamp, empty key.
type q7Max struct {
	key []byte
	bid Bid
}

func (l *q7Max) consume(c *stageCtx, env topic.Envelope) (int64, error) {
	p := env.Message.Payload
	start, n := binary.Varint(p)
	if n <= 0 {
		return 0, fmt.Errorf("%w: q7 candidates %x: no window start", ErrBadEvent, p)
	}
	val := p[n:]
	price, bids, err := q7Price(val)
	if err != nil {
		return 0, err
	}
	at := start + q7Size - 1
	l.key = appendWindowKey(l.key[:0], windowPrefix, start)
	cur, err := c.s.Get(l.key)
	if err != nil {
		return 0, err
	}
	txn := c.txn()
	if cur == nil {
		c.timers.Set(txn, at, nil)
		txn.Put(l.key, val)
		return at, nil
	}
	curPrice, _, err := q7Price(cur)
	if err != nil {
		return 0, err
	}
	switch {
	case price > curPrice:
		txn.Put(l.key, val)
	case price == curPrice:
		txn.Put(l.key, append(cur, bids...))
	}
	return at, nil
}

func (l *q7Max) fire(c *stageCtx, at int64, _ []byte) error {
	start := at + 1 - q7Size
	l.key = appendWindowKey(l.key[:0], windowPrefix, start)
	v, err := c.s.Get(l.key)
	if err != nil {
		return err
	}
	price, bids, err := q7Price(v)
	if err != nil {
		return fmt.Errorf("q7: window %d: a timer but bad or no state: %w", start, err)
	}
	c.txn().Delete(l.key)
	return q7Bids(price, bids, &l.bid, func(b *Bid) error {
		c.buf = q7Row(row(c.buf[:0]), b)
		return c.pub.Publish(q7Output, message.MutableMessage{Key: strconv.FormatInt(b.Auction, 10), Payload: c.buf})
	})
}

// q7Model keeps per window the maximum price and the bids at it.
func q7Model(events iter.Seq[*Event]) []string {
	type agg struct {
		price int64
		bids  []Bid
	}
	wins := map[int64]*agg{}
	for e := range events {
		if e.Kind != KindBid {
			continue
		}
		b := e.Bid
		start := windows.Tumble(b.DateTime, q7Size).Start
		a := wins[start]
		switch {
		case a == nil:
			wins[start] = &agg{price: b.Price, bids: []Bid{b}}
		case b.Price > a.price:
			a.price, a.bids = b.Price, []Bid{b}
		case b.Price == a.price:
			a.bids = append(a.bids, b)
		}
	}
	var out []string
	for _, a := range wins {
		for i := range a.bids {
			out = append(out, string(q7Row(nil, &a.bids[i])))
		}
	}
	return out
}
