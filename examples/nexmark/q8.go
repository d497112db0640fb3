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

// Query 8, monitor new users: the persons who opened an auction in the
// 10 s tumbling window in which they registered.
//
//	SELECT P.id, P.name, P.starttime
//	FROM (SELECT id, name, TUMBLE_START(dateTime, 10 s) AS starttime FROM person
//	      GROUP BY id, name, TUMBLE(dateTime, 10 s)) P
//	JOIN (SELECT seller, TUMBLE_START(dateTime, 10 s) AS starttime FROM auction
//	      GROUP BY seller, TUMBLE(dateTime, 10 s)) A
//	ON P.id = A.seller AND P.starttime = A.starttime
//
// A person is generated once, so there is at most one row per person.
// Stage q8-rekey sends every auction to topic q8-auction-by-seller keyed by
// seller; stage q8 keeps, per open window, the persons that registered in it
// and a marker per seller that opened an auction in it, and joins them when
// the window closes (a timer at its MaxTimestamp), deleting them: its state
// is bounded by the open windows.
const (
	q8Out      = "nexmark-q8"
	q8BySeller = "q8-auction-by-seller"
	q8Window   = 10_000 // ms
)

func init() {
	register(Query{
		Name:  "q8",
		Title: "monitor new users: persons who opened an auction in the 10 s window they registered in (windowed join)",
		Stages: []shard.App{
			rekeyStage("q8-rekey", q8BySeller, nil),
			stage{
				name:    "q8",
				inputs:  []string{TopicPerson, q8BySeller},
				marked:  []string{q8BySeller},
				outputs: []string{q8Out},
				keyedBy: TopicPerson,
				logic:   func() logic { return &q8Join{} },
			}.app(),
		},
		Topics: []TopicSpec{{Name: q8BySeller}, {Name: q8Out}},
		Output: q8Out,
		Model:  q8Model,
	})
}

// q8Row is personID|name|windowStart.
func q8Row(r row, id int64, name string, start int64) row { return r.int(id).str(name).int(start) }

// State of stage q8, for the window ending at at+1 (at is its MaxTimestamp):
//
//	"q8p/" + at + id     → the name of person id, who registered in it
//	"q8s/" + at + seller → q8Seller: seller opened an auction in it
//
// at and ids are 8 bytes big-endian (at with its sign bit flipped, as the
// timers'). Each has a timer at at, keyed 'p' + id or 's' + seller: at one
// at, every person timer fires before every seller timer, so a person's
// timer finds the seller marker of its window, and the seller timers then
// delete the markers.
var (
	q8PersonPrefix = []byte("q8p/")
	q8SellerPrefix = []byte("q8s/")
	q8Seller       = []byte{1}
)

const (
	q8PersonTimer = 'p'
	q8SellerTimer = 's' // after q8PersonTimer
)

// q8Join is stage q8's logic.
type q8Join struct {
	key, tkey, val []byte
	out            row
}

func q8Key(dst, prefix []byte, at, id int64) []byte {
	dst = binary.BigEndian.AppendUint64(append(dst[:0], prefix...), uint64(at)^(1<<63))
	return binary.BigEndian.AppendUint64(dst, uint64(id))
}

func q8TimerKey(dst []byte, kind byte, id int64) []byte {
	return binary.BigEndian.AppendUint64(append(dst[:0], kind), uint64(id))
}

func (q *q8Join) consume(c *stageCtx, env topic.Envelope) (int64, error) {
	if env.Partition.Topic == TopicPerson {
		if err := c.ev.Decode(env.Message.Payload); err != nil {
			return 0, err
		}
		if c.ev.Kind != KindPerson {
			return 0, fmt.Errorf("%w: a %s on topic %s", ErrBadEvent, c.ev.Kind, env.Partition.Topic)
		}
		p := &c.ev.Person
		at := windows.Tumble(p.DateTime, q8Window).MaxTimestamp()
		q.key = q8Key(q.key, q8PersonPrefix, at, p.ID)
		q.val = append(q.val[:0], p.Name...)
		c.txn().Put(q.key, q.val)
		q.tkey = q8TimerKey(q.tkey, q8PersonTimer, p.ID)
		c.timers.Set(c.txn(), at, q.tkey)
		return p.DateTime, nil
	}
	a, err := decodeAuction(c, env)
	if err != nil {
		return 0, err
	}
	at := windows.Tumble(a.DateTime, q8Window).MaxTimestamp()
	q.key = q8Key(q.key, q8SellerPrefix, at, a.Seller)
	c.txn().Put(q.key, q8Seller)
	q.tkey = q8TimerKey(q.tkey, q8SellerTimer, a.Seller)
	c.timers.Set(c.txn(), at, q.tkey)
	return a.DateTime, nil
}

// fire closes the window ending at at+1 for one person or one seller.
func (q *q8Join) fire(c *stageCtx, at int64, key []byte) error {
	if len(key) != 9 {
		return fmt.Errorf("q8: bad timer key %x", key)
	}
	id := int64(binary.BigEndian.Uint64(key[1:]))
	switch key[0] {
	case q8PersonTimer:
		q.key = q8Key(q.key, q8PersonPrefix, at, id)
		name, err := c.s.Get(q.key)
		if err != nil {
			return err
		}
		c.txn().Delete(q.key)
		if name == nil {
			return fmt.Errorf("q8: timer of person %d at %d: no person", id, at)
		}
		q.key = q8Key(q.key, q8SellerPrefix, at, id)
		seller, err := c.s.Get(q.key)
		if err != nil {
			return err
		}
		if seller == nil {
			return nil
		}
		q.out = q8Row(q.out[:0], id, string(name), windows.Tumble(at, q8Window).Start)
		return c.pub.Publish(q8Out, message.MutableMessage{Key: strconv.FormatInt(id, 10), Payload: q.out})
	case q8SellerTimer:
		q.key = q8Key(q.key, q8SellerPrefix, at, id)
		c.txn().Delete(q.key)
		return nil
	}
	return fmt.Errorf("q8: bad timer key %x", key)
}

// q8Model joins the persons and the sellers of auctions by (id, window).
func q8Model(events iter.Seq[*Event]) []string {
	type person struct {
		name  string
		start int64
	}
	type seller struct{ id, start int64 }
	persons := map[int64]person{}
	sellers := map[seller]bool{}
	for e := range events {
		switch e.Kind {
		case KindPerson:
			persons[e.Person.ID] = person{e.Person.Name, windows.Tumble(e.Person.DateTime, q8Window).Start}
		case KindAuction:
			sellers[seller{e.Auction.Seller, windows.Tumble(e.Auction.DateTime, q8Window).Start}] = true
		}
	}
	var out []string
	for id, p := range persons {
		if sellers[seller{id, p.start}] {
			out = append(out, string(q8Row(nil, id, p.name, p.start)))
		}
	}
	return out
}
