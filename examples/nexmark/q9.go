package nexmark

import (
	"fmt"
	"iter"
	"strconv"

	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/wal/message"
)

// Query 9, winning bids: every auction with its winning bid (winning.go),
// published when it closes. It holds the largest state of the queries: the
// whole of every open auction.
//
// One stage, "q9": the winning-bids join over partition i of the auctions
// and the bids. Its detail of an auction is the auction's event encoding,
// so the close rebuilds the whole auction for the row.
const q9Out = "nexmark-q9"

func init() {
	register(Query{
		Name:  "q9",
		Title: "winning bids: each auction with its highest qualifying bid, at its close",
		Stages: []shard.App{stage{
			name:    "q9",
			inputs:  []string{TopicAuction, TopicBid},
			outputs: []string{q9Out},
			keyedBy: TopicAuction,
			logic:   func() logic { return newWinningJoin("q9", true, q9Detail, q9Emit) },
		}.app()},
		Topics: []TopicSpec{{Name: q9Out}},
		Output: q9Out,
		Model:  q9Model,
	})
}

// q9Row is an auction's fields then its winning bid's:
// id|itemName|description|initialBid|reserve|dateTime|expires|seller|category|extra|
// auction|bidder|price|dateTime|extra.
func q9Row(r row, a *Auction, b *winBid) row {
	r = r.int(a.ID).str(a.ItemName).str(a.Description).int(a.InitialBid).int(a.Reserve).
		int(a.DateTime).int(a.Expires).int(a.Seller).int(a.Category).str(a.Extra)
	return r.int(a.ID).int(b.Bidder).int(b.Price).int(b.DateTime).str(b.Extra)
}

// q9Detail keeps the auction's encoding as it came.
func q9Detail(dst []byte, _ *Auction, payload []byte) []byte { return append(dst, payload...) }

func q9Emit(c *stageCtx, id, _ int64, detail []byte, best *winBid) error {
	if err := c.ev.Decode(detail); err != nil {
		return err
	}
	if c.ev.Kind != KindAuction || c.ev.Auction.ID != id {
		return fmt.Errorf("%w: q9: the detail of auction %d is a %s of id %d", ErrBadEvent, id, c.ev.Kind, c.ev.Auction.ID)
	}
	c.buf = q9Row(row(c.buf[:0]), &c.ev.Auction, best)
	return c.pub.Publish(q9Out, message.MutableMessage{Key: strconv.FormatInt(id, 10), Payload: c.buf})
}

func q9Model(events iter.Seq[*Event]) []string {
	var out []string
	for _, w := range winningModel(events) {
		out = append(out, string(q9Row(nil, &w.Auction, &w.Bid)))
	}
	return out
}
