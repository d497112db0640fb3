package nexmark

import (
	"fmt"
	"iter"

	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
)

// The stateless queries: each bid in, at most one row out, published to the
// output partition of the bid's auction.

func init() {
	for _, q := range []struct {
		name, title string
		row         func(r row, b *Bid) (row, bool)
	}{
		{"q0", "pass-through: every bid", q0Row},
		{"q1", "currency conversion: every bid with its price × 0.908", q1Row},
		{"q2", "selection: the auction and price of bids on auctions whose id % 123 == 0", q2Row},
	} {
		out := "nexmark-" + q.name
		rowOf := q.row
		register(Query{
			Name:  q.name,
			Title: q.title,
			Stages: []shard.App{stage{
				name: q.name, inputs: []string{TopicBid}, outputs: []string{out},
				logic: func() logic { return &bidMap{out: out, row: rowOf} },
			}.app()},
			Topics: []TopicSpec{{Name: out}},
			Output: out,
			Model:  func(events iter.Seq[*Event]) []string { return mapBids(events, rowOf) },
		})
	}
}

func q0Row(r row, b *Bid) (row, bool) {
	return r.int(b.Auction).int(b.Bidder).int(b.Price).str(b.Channel).str(b.URL).int(b.DateTime).str(b.Extra), true
}

func q1Row(r row, b *Bid) (row, bool) {
	return r.int(b.Auction).int(b.Bidder).float(0.908 * float64(b.Price)).int(b.DateTime).str(b.Extra), true
}

func q2Row(r row, b *Bid) (row, bool) {
	if b.Auction%123 != 0 {
		return r, false
	}
	return r.int(b.Auction).int(b.Price), true
}

// bidMap is the logic of a stateless query over bids.
type bidMap struct {
	out string
	row func(r row, b *Bid) (row, bool)
}

func (m *bidMap) consume(c *stageCtx, env topic.Envelope) (int64, error) {
	if err := c.ev.DecodeView(env.Message.Payload); err != nil { // the row copies what it keeps
		return 0, err
	}
	if c.ev.Kind != KindBid {
		return 0, fmt.Errorf("%w: a %s on topic %s", ErrBadEvent, c.ev.Kind, env.Partition.Topic)
	}
	r, ok := m.row(row(c.buf[:0]), &c.ev.Bid)
	c.buf = r
	if ok {
		if err := c.pub.Publish(m.out, message.MutableMessage{Key: env.Message.Key, Payload: r}); err != nil {
			return 0, err
		}
	}
	return c.ev.Bid.DateTime, nil
}

func (*bidMap) fire(*stageCtx, int64, []byte) error { return nil }

func mapBids(events iter.Seq[*Event], rowOf func(r row, b *Bid) (row, bool)) []string {
	var out []string
	for e := range events {
		if e.Kind != KindBid {
			continue
		}
		if r, ok := rowOf(nil, &e.Bid); ok {
			out = append(out, string(r))
		}
	}
	return out
}
