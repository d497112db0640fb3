package nexmark

import "strconv"

// The generator's topics, one per kind of event. Each event is keyed by the
// id a query joins or groups it on most: a person by its id, an auction by
// its id, a bid by its auction's id. So auctions and bids are co-partitioned
// (a query joining them on the auction id needs no re-keying; q4 and q9), and
// a query needing another key (q3, q8: auctions by seller) re-keys through a
// topic of its own.
const (
	TopicPerson  = "nexmark-person"
	TopicAuction = "nexmark-auction"
	TopicBid     = "nexmark-bid"
)

// SourceTopics are the generator's topics.
var SourceTopics = []string{TopicPerson, TopicAuction, TopicBid}

// DefaultPartitions is the default partition count of the source topics (and
// of every query topic that is not a single partition by design).
const DefaultPartitions = 4

// Topic is the topic e is published to.
func (e *Event) Topic() string {
	switch e.Kind {
	case KindPerson:
		return TopicPerson
	case KindAuction:
		return TopicAuction
	}
	return TopicBid
}

// Key is the message key e is published with (see TopicPerson).
func (e *Event) Key() string {
	switch e.Kind {
	case KindPerson:
		return strconv.FormatInt(e.Person.ID, 10)
	case KindAuction:
		return strconv.FormatInt(e.Auction.ID, 10)
	}
	return strconv.FormatInt(e.Bid.Auction, 10)
}
