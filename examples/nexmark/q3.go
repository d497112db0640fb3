package nexmark

import (
	"encoding/binary"
	"fmt"
	"iter"
	"strconv"

	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
)

// Query 3, local item suggestion: who is selling in category 10 in Oregon,
// Idaho or California.
//
//	SELECT P.name, P.city, P.state, A.id
//	FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
//	WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')
//
// An unbounded join: its state grows with the persons (as in the reference).
// Stage q3-rekey sends the auctions of category 10 to topic
// q3-auction-by-seller, keyed by seller, so that stage q3 finds each one in
// the shard of its seller's person. There a person may come before or after
// its auctions (an auction's seller may be a person not yet generated, and
// the two topics interleave in no fixed order), so q3 keeps, per person, what
// a later auction needs, and per unknown seller the ids of its auctions, and
// emits each pair once, when its second side arrives.
const (
	q3Out      = "nexmark-q3"
	q3BySeller = "q3-auction-by-seller"
	q3Category = 10
)

func init() {
	register(Query{
		Name:  "q3",
		Title: "local item suggestion: sellers in OR, ID or CA of category 10 auctions (unbounded join)",
		Stages: []shard.App{
			rekeyStage("q3-rekey", q3BySeller, q3Auction),
			stage{
				name:    "q3",
				inputs:  []string{TopicPerson, q3BySeller},
				marked:  []string{q3BySeller},
				outputs: []string{q3Out},
				keyedBy: TopicPerson,
				logic:   func() logic { return &q3Join{} },
			}.app(),
		},
		Topics: []TopicSpec{{Name: q3BySeller}, {Name: q3Out}},
		Output: q3Out,
		Model:  q3Model,
	})
}

// q3Auction is whether the auction takes part: category 10.
func q3Auction(a *Auction) bool { return a.Category == q3Category }

// q3Person is whether the person takes part: state OR, ID or CA.
func q3Person(p *Person) bool {
	switch p.State {
	case "OR", "ID", "CA":
		return true
	}
	return false
}

// q3Prefix is the person's part of a row, name|city|state; q3Row completes
// it with the auction: name|city|state|auctionID.
func q3Prefix(r row, p *Person) row { return r.str(p.Name).str(p.City).str(p.State) }

func q3Row(prefix row, auction int64) row { return prefix.int(auction) }

// State of stage q3, point lookups only:
//
//	"q3p/" + id (8 bytes big-endian) → q3Match + q3Prefix of the person, or
//	                                   q3NoMatch (its state is not wanted)
//	"q3a/" + seller (same)           → the ids (varints) of the seller's
//	                                   auctions, while no person of that id
//	                                   arrived
//
// A person's key is written when it arrives, and the seller's pending key is
// deleted then: so each auction is either pending or joined, once.
var (
	q3PersonPrefix  = []byte("q3p/")
	q3PendingPrefix = []byte("q3a/")
)

const (
	q3Match   = 'M'
	q3NoMatch = 'N'
)

// q3Join is stage q3's logic.
type q3Join struct {
	key, val []byte
	out      row
}

func q3Key(dst, prefix []byte, id int64) []byte {
	return binary.BigEndian.AppendUint64(append(dst[:0], prefix...), uint64(id))
}

func (q *q3Join) consume(c *stageCtx, env topic.Envelope) (int64, error) {
	if env.Partition.Topic == TopicPerson {
		return q.person(c, env)
	}
	a, err := decodeAuction(c, env)
	if err != nil {
		return 0, err
	}
	q.key = q3Key(q.key, q3PersonPrefix, a.Seller)
	p, err := c.s.Get(q.key)
	if err != nil {
		return 0, err
	}
	switch {
	case p == nil: // the seller is yet to come: the auction waits for it
		q.key = q3Key(q.key, q3PendingPrefix, a.Seller)
		pending, err := c.s.Get(q.key)
		if err != nil {
			return 0, err
		}
		c.txn().Put(q.key, binary.AppendVarint(pending, a.ID))
	case p[0] == q3Match:
		if err := q.emit(c, p[1:], a.ID); err != nil {
			return 0, err
		}
	case p[0] != q3NoMatch:
		return 0, fmt.Errorf("q3: person %d: bad state %q", a.Seller, p)
	}
	return a.DateTime, nil
}

// person records a person and joins the auctions that waited for it.
func (q *q3Join) person(c *stageCtx, env topic.Envelope) (int64, error) {
	if err := c.ev.Decode(env.Message.Payload); err != nil {
		return 0, err
	}
	if c.ev.Kind != KindPerson {
		return 0, fmt.Errorf("%w: a %s on topic %s", ErrBadEvent, c.ev.Kind, env.Partition.Topic)
	}
	p := &c.ev.Person
	match := q3Person(p)
	if match {
		q.out = q3Prefix(q.out[:0], p) // row(q.val) would start with a '|'
		q.val = append(append(q.val[:0], q3Match), q.out...)
	} else {
		q.val = append(q.val[:0], q3NoMatch)
	}
	q.key = q3Key(q.key, q3PendingPrefix, p.ID)
	pending, err := c.s.Get(q.key)
	if err != nil {
		return 0, err
	}
	if pending != nil {
		c.txn().Delete(q.key)
		for b := pending; match && len(b) > 0; {
			id, n := binary.Varint(b)
			if n <= 0 {
				return 0, fmt.Errorf("q3: pending auctions of seller %d: bad value %x", p.ID, pending)
			}
			b = b[n:]
			if err := q.emit(c, q.val[1:], id); err != nil {
				return 0, err
			}
		}
	}
	q.key = q3Key(q.key, q3PersonPrefix, p.ID)
	c.txn().Put(q.key, q.val)
	return p.DateTime, nil
}

// emit publishes the row of a person (its prefix) and an auction, keyed by
// the auction.
func (q *q3Join) emit(c *stageCtx, prefix []byte, auction int64) error {
	q.out = q3Row(append(q.out[:0], prefix...), auction)
	return c.pub.Publish(q3Out, message.MutableMessage{Key: strconv.FormatInt(auction, 10), Payload: q.out})
}

func (*q3Join) fire(*stageCtx, int64, []byte) error { return nil }

// q3Model joins every category 10 auction with its seller, if the seller is
// among the events and in OR, ID or CA.
func q3Model(events iter.Seq[*Event]) []string {
	prefixes := map[int64]row{} // the matching persons
	type auction struct{ id, seller int64 }
	var auctions []auction
	for e := range events {
		switch e.Kind {
		case KindPerson:
			if q3Person(&e.Person) {
				prefixes[e.Person.ID] = q3Prefix(nil, &e.Person)
			}
		case KindAuction:
			if q3Auction(&e.Auction) {
				auctions = append(auctions, auction{e.Auction.ID, e.Auction.Seller})
			}
		}
	}
	var out []string
	for _, a := range auctions {
		if p, ok := prefixes[a.seller]; ok {
			out = append(out, string(q3Row(p[:len(p):len(p)], a.id)))
		}
	}
	return out
}
