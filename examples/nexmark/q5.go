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

// q5, hot items: for every hopping window of 10 s sliding every 2 s, the
// auctions with the most bids in it (every auction tied at the maximum).
//
// Stage 1 (q5-count, one shard per bid partition) counts bids per (window,
// auction); when a window closes it sends the auctions at its local maximum
// to q5-candidates, keyed by the window's start, so every candidate of a
// window lands in one partition. Stage 2 (q5, the shard of that partition)
// keeps, per window, the largest count heard and the auctions at it, and emits them when
// every stage-1 shard's mark passed the window. Bids of one auction are all
// in one partition, so a local count is the auction's global count, and the
// global maximum is the maximum of the local maxima.
const (
	q5Size       = 10_000
	q5Slide      = 2_000
	q5Candidates = "q5-candidates"
	q5Output     = "nexmark-q5"
)

func init() {
	register(Query{
		Name:  "q5",
		Title: "hot items: per 10 s window sliding every 2 s, the auctions with the most bids",
		Stages: []shard.App{
			stage{
				name: "q5-count", inputs: []string{TopicBid}, outputs: []string{q5Candidates},
				logic: func() logic { return &q5Count{counts: map[q5Key]int64{}, dirty: map[q5Key]struct{}{}} },
			}.app(),
			stage{
				name: "q5", inputs: []string{q5Candidates}, marked: []string{q5Candidates}, outputs: []string{q5Output},
				logic: func() logic { return &q5Max{} },
			}.app(),
		},
		Topics: []TopicSpec{{Name: q5Candidates}, {Name: q5Output}},
		Output: q5Output,
		Model:  q5Model,
	})
}

// q5Row is a result row: windowStart|auction|count.
func q5Row(r row, start, auction, count int64) row {
	return r.int(start).int(auction).int(count)
}

// q5Key is one (window, auction) count.
type q5Key struct{ start, auction int64 }

// q5Count is stage 1's logic.
//
// State: "c/" + window start (8 bytes, big endian) + auction id (8 bytes) →
// the count (varint). Timer: at the window's MaxTimestamp, key the auction id
// (8 bytes), set when the count is created; so a window's timers fire
// consecutively, in auction order, and the last of them finishes the window
// (the next window's first timer, or afterFire).
type q5Count struct {
	// counts mirrors the counts this primary wrote or read, so that only a
	// count that may have been written by an earlier primary costs a Get.
	counts map[q5Key]int64
	// dirty are the counts the open transaction changed, written once in
	// flushTxn: a bid is in 5 windows, and a hot auction's count changes many
	// times per transaction, so a Put per bid and window wrote most of them
	// over and over (RocksDB writes then dominated q5's CPU).
	dirty map[q5Key]struct{}
	// first is the event time of this primary's first bid (once started):
	// bids arrive in event-time order per partition (give or take the
	// watermark delay), so no earlier primary consumed a bid later than
	// first+watermarkDelay, and a window starting after that has no count
	// from one (nor a timer): its first count needs no Get.
	first   int64
	started bool
	wins    []windows.Window
	key     []byte
	// The window being fired.
	grp q5Group
}

// q5Group collects the fired counts of one window: its local maximum.
type q5Group struct {
	open     bool
	at       int64
	max      int64
	auctions []int64
}

var _ fireGrouper = (*q5Count)(nil)

// Prefixes of the stages' state (after the runner's w/ and t/).
var (
	countPrefix  = []byte("c/")
	windowPrefix = []byte("m/")
)

// appendWindowKey appends prefix + start (8 bytes, big endian).
func appendWindowKey(dst, prefix []byte, start int64) []byte {
	dst = append(dst, prefix...)
	return binary.BigEndian.AppendUint64(dst, uint64(start))
}

func (l *q5Count) countKey(start, auction int64) []byte {
	l.key = appendWindowKey(l.key[:0], countPrefix, start)
	l.key = binary.BigEndian.AppendUint64(l.key, uint64(auction))
	return l.key
}

func (l *q5Count) consume(c *stageCtx, env topic.Envelope) (int64, error) {
	auction, _, ts, err := peekBid(env.Message.Payload)
	if err != nil {
		return 0, fmt.Errorf("on topic %s: %w", env.Partition.Topic, err)
	}
	if !l.started {
		l.first, l.started = ts, true
	}
	txn := c.txn()
	l.wins = windows.Hop(ts, q5Size, q5Slide, l.wins[:0])
	for _, w := range l.wins {
		k := q5Key{w.Start, auction}
		key := l.countKey(w.Start, auction)
		n, ok := l.counts[k]
		if !ok && w.Start <= l.first+watermarkDelay {
			if n, err = getVarint(c.s, key); err != nil {
				return 0, err
			}
		}
		if n == 0 {
			var a [8]byte
			binary.BigEndian.PutUint64(a[:], uint64(auction))
			c.timers.Set(txn, w.MaxTimestamp(), a[:])
		}
		n++
		l.counts[k] = n
		l.dirty[k] = struct{}{}
	}
	return ts, nil
}

func (l *q5Count) flushTxn(c *stageCtx) error {
	txn := c.txn()
	for k := range l.dirty {
		c.buf = binary.AppendVarint(c.buf[:0], l.counts[k])
		txn.Put(l.countKey(k.start, k.auction), c.buf)
	}
	clear(l.dirty)
	return nil
}

func (l *q5Count) fire(c *stageCtx, at int64, key []byte) error {
	if len(key) != 8 {
		return fmt.Errorf("q5-count: timer key %x: want an 8-byte auction id", key)
	}
	start := at + 1 - q5Size
	auction := int64(binary.BigEndian.Uint64(key))
	if l.grp.open && l.grp.at != at {
		if err := l.finish(c); err != nil {
			return err
		}
	}
	k := q5Key{start, auction}
	sk := l.countKey(start, auction)
	n, ok := l.counts[k]
	if !ok {
		var err error
		if n, err = getVarint(c.s, sk); err != nil {
			return err
		}
	}
	if n <= 0 {
		return fmt.Errorf("q5-count: window %d, auction %d: a timer but no count", start, auction)
	}
	delete(l.counts, k)
	c.txn().Delete(sk)
	g := &l.grp
	switch {
	case !g.open:
		*g = q5Group{open: true, at: at, max: n, auctions: append(g.auctions[:0], auction)}
	case n > g.max:
		g.max, g.auctions = n, append(g.auctions[:0], auction)
	case n == g.max:
		g.auctions = append(g.auctions, auction)
	}
	return nil
}

func (l *q5Count) afterFire(c *stageCtx) error {
	if !l.grp.open {
		return nil
	}
	return l.finish(c)
}

// finish publishes the fired window's local candidates: start, count, then
// the auctions, varints.
func (l *q5Count) finish(c *stageCtx) error {
	g := &l.grp
	g.open = false
	start := g.at + 1 - q5Size
	c.buf = binary.AppendVarint(c.buf[:0], start)
	c.buf = binary.AppendVarint(c.buf, g.max)
	for _, a := range g.auctions {
		c.buf = binary.AppendVarint(c.buf, a)
	}
	return c.pub.Publish(q5Candidates, message.MutableMessage{Key: strconv.FormatInt(start, 10), Payload: c.buf})
}

// q5Max is stage 2's logic.
//
// State: "m/" + window start (8 bytes, big endian) → the largest count heard
// and the auctions at it (varints). Timer: at the window's MaxTimestamp, empty
// key.
type q5Max struct {
	key      []byte
	auctions []int64
}

func (l *q5Max) consume(c *stageCtx, env topic.Envelope) (int64, error) {
	d := decoder{b: env.Message.Payload}
	start, count := d.int(), d.int()
	if d.err != nil || count <= 0 || len(d.b) == 0 {
		return 0, fmt.Errorf("%w: q5 candidates %x: want window start, count > 0, auctions", ErrBadEvent, env.Message.Payload)
	}
	auctions := d.b
	at := start + q5Size - 1
	l.key = appendWindowKey(l.key[:0], windowPrefix, start)
	cur, err := c.s.Get(l.key)
	if err != nil {
		return 0, err
	}
	txn := c.txn()
	if cur == nil {
		c.timers.Set(txn, at, nil)
	}
	var max int64
	if cur != nil {
		if max, _ = binary.Varint(cur); max <= 0 {
			return 0, fmt.Errorf("q5: window %d: bad state %x", start, cur)
		}
	}
	switch {
	case count > max:
		c.buf = binary.AppendVarint(c.buf[:0], count)
		c.buf = append(c.buf, auctions...)
		txn.Put(l.key, c.buf)
	case count == max:
		txn.Put(l.key, append(cur, auctions...))
	}
	return at, nil
}

func (l *q5Max) fire(c *stageCtx, at int64, _ []byte) error {
	start := at + 1 - q5Size
	l.key = appendWindowKey(l.key[:0], windowPrefix, start)
	v, err := c.s.Get(l.key)
	if err != nil {
		return err
	}
	d := decoder{b: v}
	count := d.int()
	l.auctions = l.auctions[:0]
	for d.err == nil && len(d.b) > 0 {
		l.auctions = append(l.auctions, d.int())
	}
	if d.err != nil || count <= 0 || len(l.auctions) == 0 {
		return fmt.Errorf("q5: window %d: a timer but bad or no state %x", start, v)
	}
	c.txn().Delete(l.key)
	for _, a := range l.auctions {
		c.buf = q5Row(row(c.buf[:0]), start, a, count)
		if err := c.pub.Publish(q5Output, message.MutableMessage{Key: strconv.FormatInt(a, 10), Payload: c.buf}); err != nil {
			return err
		}
	}
	return nil
}

// getVarint reads a varint value through the open transaction: 0 if the key
// is missing.
func getVarint(s shard.Shard, key []byte) (int64, error) {
	v, err := s.Get(key)
	if err != nil || v == nil {
		return 0, err
	}
	n, k := binary.Varint(v)
	if k != len(v) {
		return 0, fmt.Errorf("key %x: bad varint value %x", key, v)
	}
	return n, nil
}

// peekBid decodes only a bid's auction, price and event time from its
// encoding (Event.Append), without the strings the full Decode allocates: the
// hot path of q5 and q7.
func peekBid(b []byte) (auction, price, ts int64, err error) {
	switch {
	case len(b) == 0:
		return 0, 0, 0, fmt.Errorf("%w: empty payload", ErrBadEvent)
	case Kind(b[0]) != KindBid:
		return 0, 0, 0, fmt.Errorf("%w: a %s, want a bid", ErrBadEvent, Kind(b[0]))
	}
	b = b[1:]
	var v [3]int64
	for i := range v {
		n := 0
		if v[i], n = binary.Varint(b); n <= 0 {
			return 0, 0, 0, errTruncatedBid
		}
		b = b[n:]
	}
	for range 2 { // channel, url
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return 0, 0, 0, errTruncatedBid
		}
		b = b[n+int(l):]
	}
	ts, n := binary.Varint(b)
	if n <= 0 {
		return 0, 0, 0, errTruncatedBid
	}
	return v[0], v[2], ts, nil
}

var errTruncatedBid = fmt.Errorf("%w: bid: truncated", ErrBadEvent)

// q5Model counts every bid in its 5 windows, then keeps per window the
// auctions at its maximum.
func q5Model(events iter.Seq[*Event]) []string {
	counts := map[q5Key]int64{}
	var ws []windows.Window
	for e := range events {
		if e.Kind != KindBid {
			continue
		}
		ws = windows.Hop(e.Bid.DateTime, q5Size, q5Slide, ws[:0])
		for _, w := range ws {
			counts[q5Key{w.Start, e.Bid.Auction}]++
		}
	}
	maxOf := map[int64]int64{}
	for k, n := range counts {
		maxOf[k.start] = max(maxOf[k.start], n)
	}
	var out []string
	for k, n := range counts {
		if n == maxOf[k.start] {
			out = append(out, string(q5Row(nil, k.start, k.auction, n)))
		}
	}
	return out
}
