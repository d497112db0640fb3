package nexmark

import (
	"fmt"
	"strconv"

	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
)

// A re-key stage reads the auctions (keyed by auction id) and publishes those
// that keep accepts, re-encoded, to out keyed by their seller, so that they
// land in the partition of their seller's person (persons are keyed by id,
// and out has as many partitions as the sources). q3 and q8 each have their
// own, so that either query runs alone.
func rekeyStage(name, out string, keep func(a *Auction) bool) shard.App {
	return stage{
		name: name, inputs: []string{TopicAuction}, outputs: []string{out},
		logic: func() logic { return &rekey{out: out, keep: keep} },
	}.app()
}

// rekey is a re-key stage's logic: stateless, one auction in, at most one
// message out.
type rekey struct {
	out  string
	keep func(a *Auction) bool // nil keeps every auction
}

func (r *rekey) consume(c *stageCtx, env topic.Envelope) (int64, error) {
	if err := c.ev.Decode(env.Message.Payload); err != nil {
		return 0, err
	}
	if c.ev.Kind != KindAuction {
		return 0, fmt.Errorf("%w: a %s on topic %s", ErrBadEvent, c.ev.Kind, env.Partition.Topic)
	}
	a := &c.ev.Auction
	if r.keep == nil || r.keep(a) {
		c.buf = c.ev.Append(c.buf[:0])
		if err := c.pub.Publish(r.out, message.MutableMessage{Key: strconv.FormatInt(a.Seller, 10), Payload: c.buf}); err != nil {
			return 0, err
		}
	}
	return a.DateTime, nil
}

func (*rekey) fire(*stageCtx, int64, []byte) error { return nil }

// decodeAuction decodes a re-keyed auction into c.ev.
func decodeAuction(c *stageCtx, env topic.Envelope) (*Auction, error) {
	if err := c.ev.Decode(env.Message.Payload); err != nil {
		return nil, err
	}
	if c.ev.Kind != KindAuction {
		return nil, fmt.Errorf("%w: a %s on topic %s", ErrBadEvent, c.ev.Kind, env.Partition.Topic)
	}
	return &c.ev.Auction, nil
}
