package nexmark

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"

	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
)

// Query 4, average closing price per category: as each auction closes, the
// running average of the final prices (the winning bids', winning.go) of the
// closed auctions of its category.
//
//	SELECT category, COUNT(*), AVG(final) FROM (winning bids) GROUP BY category
//
// emitted after each closing, in (expires, auction id) order: one row
// category|closedCount|avg per closing, avg the integer quotient of the sum
// of the final prices by the count (SQL AVG over BIGINT).
//
// Stage "q4-winning" is the winning-bids join; at each close it publishes a
// q4Closing to topic q4-winning keyed by the category. Stage "q4" reads it
// (a marked input: several join shards feed each partition) and, so that its
// rows do not depend on the order closings of different join shards arrive
// in, buffers each closing with a timer at its Expires and applies it once
// its watermark reaches Expires: then every closing with that Expires has
// arrived (each join shard publishes a closing before the mark that covers
// its Expires), and they are applied in auction id order.
const (
	q4Out     = "nexmark-q4"
	q4Winning = "q4-winning"
)

func init() {
	register(Query{
		Name:  "q4",
		Title: "average closing price per category: running count and average of the winning prices, per closing",
		Stages: []shard.App{
			stage{
				name:    "q4-winning",
				inputs:  []string{TopicAuction, TopicBid},
				outputs: []string{q4Winning},
				keyedBy: TopicAuction,
				logic:   func() logic { return newWinningJoin("q4-winning", false, q4Detail, q4Emit) },
			}.app(),
			stage{
				name:    "q4",
				inputs:  []string{q4Winning},
				marked:  []string{q4Winning},
				outputs: []string{q4Out},
				keyedBy: q4Winning,
				logic:   func() logic { return &q4Avg{} },
			}.app(),
		},
		Topics: []TopicSpec{{Name: q4Winning}, {Name: q4Out}},
		Output: q4Out,
		Model:  q4Model,
	})
}

// q4Closing is a closed auction as stage q4 needs it.
type q4Closing struct {
	ID, Category, Expires, Price int64
}

// q4Before orders closings as stage q4 applies them: by (expires, id).
func q4Before(a, b q4Closing) int {
	if c := cmp.Compare(a.Expires, b.Expires); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// q4Row is category|closedCount|avg.
func q4Row(r row, category, count, sum int64) row {
	return r.int(category).int(count).int(sum / count)
}

// The q4-winning record: the auction id, category, expires and final price,
// zig-zag varints in that order, nothing after.

func appendQ4Closing(dst []byte, cl *q4Closing) []byte {
	dst = binary.AppendVarint(dst, cl.ID)
	dst = binary.AppendVarint(dst, cl.Category)
	dst = binary.AppendVarint(dst, cl.Expires)
	return binary.AppendVarint(dst, cl.Price)
}

// errBadQ4Closing is wrapped by every error decoding a q4-winning record.
var errBadQ4Closing = errors.New("bad q4-winning record")

func decodeQ4Closing(b []byte, cl *q4Closing) error {
	d := fieldDecoder{b: b}
	cl.ID = d.int("auction id")
	cl.Category = d.int("category")
	cl.Expires = d.int("expires")
	cl.Price = d.int("final price")
	if err := d.end(); err != nil {
		return fmt.Errorf("%w %x: %w", errBadQ4Closing, b, err)
	}
	return nil
}

// q4Detail keeps an auction's category.
func q4Detail(dst []byte, a *Auction, _ []byte) []byte { return binary.AppendVarint(dst, a.Category) }

// q4Emit publishes a closing, keyed by its category.
func q4Emit(c *stageCtx, id, expires int64, detail []byte, best *winBid) error {
	cat, n := binary.Varint(detail)
	if n <= 0 || n != len(detail) {
		return fmt.Errorf("q4-winning: auction %d: detail %x: want the category as one varint", id, detail)
	}
	cl := q4Closing{ID: id, Category: cat, Expires: expires, Price: best.Price}
	c.buf = appendQ4Closing(c.buf[:0], &cl)
	return c.pub.Publish(q4Winning, message.MutableMessage{Key: strconv.FormatInt(cat, 10), Payload: c.buf})
}

// State of stage q4, point lookups only:
//
//	"q4c/" + category (8 bytes big-endian) → the closed count and the sum of
//	    final prices applied so far, then the buffered closings (expires, id,
//	    price), varints
//
// and a timer (expires, category) per buffered expires time.
var q4CategoryPrefix = []byte("q4c/")

// q4Avg is stage q4's logic.
type q4Avg struct {
	cl       q4Closing
	key, val []byte
	buf      []q4Closing // scratch: the due closings
	// cats caches the categories' state this primary read, and dirty those
	// the open transaction changed, written once per Flush (before and after
	// the timers fire): re-encoding a category's buffered closings for every
	// closing that arrived was most of q4's CPU.
	cats  map[int64]*q4Category
	dirty map[int64]struct{}
}

var (
	_ txnFlusher  = (*q4Avg)(nil)
	_ fireGrouper = (*q4Avg)(nil)
)

// q4Category is a category's state.
type q4Category struct {
	count, sum int64
	pending    []q4Closing
}

func (q *q4Avg) consume(c *stageCtx, env topic.Envelope) (int64, error) {
	if err := decodeQ4Closing(env.Message.Payload, &q.cl); err != nil {
		return 0, err
	}
	// Cannot be: the closing precedes its sender's mark >= Expires, and the
	// watermark is the least of the senders' marks. If it were, its timer
	// would fire out of (expires, id) order.
	if q.cl.Expires <= c.wm {
		return 0, fmt.Errorf("q4: closing of auction %d (expires %d) arrived after the watermark %d passed it", q.cl.ID, q.cl.Expires, c.wm)
	}
	st, err := q.load(c, q.cl.Category)
	if err != nil {
		return 0, err
	}
	st.pending = append(st.pending, q4Closing{ID: q.cl.ID, Expires: q.cl.Expires, Price: q.cl.Price})
	q.dirty[q.cl.Category] = struct{}{}
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], uint64(q.cl.Category))
	c.timers.Set(c.txn(), q.cl.Expires, k[:])
	return q.cl.Expires, nil
}

// fire applies a category's closings of time at, in id order.
func (q *q4Avg) fire(c *stageCtx, at int64, key []byte) error {
	if len(key) != 8 {
		return fmt.Errorf("q4: timer key %x: want an 8-byte category", key)
	}
	cat := int64(binary.BigEndian.Uint64(key))
	st, err := q.load(c, cat)
	if err != nil {
		return err
	}
	due := q.buf[:0]
	kept := st.pending[:0]
	for _, cl := range st.pending {
		if cl.Expires <= at {
			due = append(due, cl)
		} else {
			kept = append(kept, cl)
		}
	}
	q.buf = due
	st.pending = kept
	if len(due) == 0 {
		return fmt.Errorf("q4: timer at %d of category %d: no closing buffered for it", at, cat)
	}
	slices.SortFunc(due, q4Before)
	for _, cl := range due {
		st.count++
		st.sum += cl.Price
		c.buf = q4Row(row(c.buf[:0]), cat, st.count, st.sum)
		if err := c.pub.Publish(q4Out, message.MutableMessage{Key: strconv.FormatInt(cat, 10), Payload: c.buf}); err != nil {
			return err
		}
	}
	q.dirty[cat] = struct{}{}
	return nil
}

func (q *q4Avg) flushTxn(c *stageCtx) error  { q.writeDirty(c); return nil }
func (q *q4Avg) afterFire(c *stageCtx) error { q.writeDirty(c); return nil }

// writeDirty writes the categories the transaction changed.
func (q *q4Avg) writeDirty(c *stageCtx) {
	for cat := range q.dirty {
		q.store(c, cat, q.cats[cat])
	}
	clear(q.dirty)
}

// load reads a category's state; it leaves the key in q.key.
func (q *q4Avg) load(c *stageCtx, cat int64) (*q4Category, error) {
	if st, ok := q.cats[cat]; ok {
		return st, nil
	}
	if q.cats == nil {
		q.cats, q.dirty = map[int64]*q4Category{}, map[int64]struct{}{}
	}
	q.key = binary.BigEndian.AppendUint64(append(q.key[:0], q4CategoryPrefix...), uint64(cat))
	v, err := c.s.Get(q.key)
	if err != nil {
		return nil, err
	}
	if v == nil {
		st := &q4Category{}
		q.cats[cat] = st
		return st, nil
	}
	d := fieldDecoder{b: v}
	st := &q4Category{count: d.int("closed count"), sum: d.int("sum of final prices")}
	for d.err == nil && len(d.b) > 0 {
		var cl q4Closing
		cl.Expires = d.int("buffered expires")
		cl.ID = d.int("buffered auction id")
		cl.Price = d.int("buffered final price")
		st.pending = append(st.pending, cl)
	}
	if err := d.end(); err != nil {
		return nil, fmt.Errorf("q4: state of category %d: value %x: %w", cat, v, err)
	}
	q.cats[cat] = st
	return st, nil
}

// store writes a category's state.
func (q *q4Avg) store(c *stageCtx, cat int64, st *q4Category) {
	q.key = binary.BigEndian.AppendUint64(append(q.key[:0], q4CategoryPrefix...), uint64(cat))
	q.val = binary.AppendVarint(q.val[:0], st.count)
	q.val = binary.AppendVarint(q.val, st.sum)
	for _, cl := range st.pending {
		q.val = binary.AppendVarint(q.val, cl.Expires)
		q.val = binary.AppendVarint(q.val, cl.ID)
		q.val = binary.AppendVarint(q.val, cl.Price)
	}
	c.txn().Put(q.key, q.val)
}

// q4Model applies every winner's closing in (expires, id) order.
func q4Model(events iter.Seq[*Event]) []string {
	var closings []q4Closing
	for _, w := range winningModel(events) {
		closings = append(closings, q4Closing{ID: w.Auction.ID, Category: w.Auction.Category, Expires: w.Auction.Expires, Price: w.Bid.Price})
	}
	return q4Rows(closings)
}

// q4Rows is the rows of closings applied in (expires, id) order.
func q4Rows(closings []q4Closing) []string {
	slices.SortFunc(closings, q4Before)
	type agg struct{ count, sum int64 }
	aggs := map[int64]*agg{}
	var out []string
	for _, cl := range closings {
		a := aggs[cl.Category]
		if a == nil {
			a = &agg{}
			aggs[cl.Category] = a
		}
		a.count++
		a.sum += cl.Price
		out = append(out, string(q4Row(nil, cl.Category, a.count, a.sum)))
	}
	return out
}
