package nexmark

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// Kind is an event's type, also the first byte of its encoding.
type Kind byte

// The three kinds of Nexmark event.
const (
	KindPerson  Kind = 'P'
	KindAuction Kind = 'A'
	KindBid     Kind = 'B'
)

func (k Kind) String() string {
	switch k {
	case KindPerson:
		return "person"
	case KindAuction:
		return "auction"
	case KindBid:
		return "bid"
	}
	return fmt.Sprintf("kind(%#x)", byte(k))
}

// Person is a new user of the auction site. Times are event time in ms since
// the Unix epoch.
type Person struct {
	ID         int64
	Name       string
	Email      string
	CreditCard string
	City       string
	State      string
	DateTime   int64
	Extra      string
}

// Auction is an item put up for auction by Seller, open from DateTime to
// Expires.
type Auction struct {
	ID          int64
	ItemName    string
	Description string
	InitialBid  int64
	Reserve     int64
	DateTime    int64
	Expires     int64
	Seller      int64
	Category    int64
	Extra       string
}

// Bid is a bid of Bidder on Auction.
type Bid struct {
	Auction  int64
	Bidder   int64
	Price    int64
	Channel  string
	URL      string
	DateTime int64
	Extra    string
}

// Event is one generated event: Kind says which of Person, Auction and Bid
// holds it (the others are zero).
type Event struct {
	Kind    Kind
	Person  Person
	Auction Auction
	Bid     Bid
}

// Time is the event's event time.
func (e *Event) Time() int64 {
	switch e.Kind {
	case KindPerson:
		return e.Person.DateTime
	case KindAuction:
		return e.Auction.DateTime
	}
	return e.Bid.DateTime
}

// Encoding: the kind byte, then the fields in declaration order, each int64
// a zig-zag varint and each string a uvarint length and its bytes. It is
// compact (a bid averages about 100 bytes, as in the reference generator)
// and costs no reflection to decode.

// Append appends e's encoding to dst.
func (e *Event) Append(dst []byte) []byte {
	dst = append(dst, byte(e.Kind))
	switch e.Kind {
	case KindPerson:
		p := &e.Person
		dst = binary.AppendVarint(dst, p.ID)
		dst = appendStrings(dst, p.Name, p.Email, p.CreditCard, p.City, p.State)
		dst = binary.AppendVarint(dst, p.DateTime)
		dst = appendStrings(dst, p.Extra)
	case KindAuction:
		a := &e.Auction
		dst = binary.AppendVarint(dst, a.ID)
		dst = appendStrings(dst, a.ItemName, a.Description)
		for _, v := range [...]int64{a.InitialBid, a.Reserve, a.DateTime, a.Expires, a.Seller, a.Category} {
			dst = binary.AppendVarint(dst, v)
		}
		dst = appendStrings(dst, a.Extra)
	case KindBid:
		b := &e.Bid
		for _, v := range [...]int64{b.Auction, b.Bidder, b.Price} {
			dst = binary.AppendVarint(dst, v)
		}
		dst = appendStrings(dst, b.Channel, b.URL)
		dst = binary.AppendVarint(dst, b.DateTime)
		dst = appendStrings(dst, b.Extra)
	}
	return dst
}

func appendStrings(dst []byte, ss ...string) []byte {
	for _, s := range ss {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	return dst
}

// ErrBadEvent is wrapped by every decoding error.
var ErrBadEvent = errors.New("bad nexmark event")

// Decode decodes an event encoded by Append into e, overwriting it.
func (e *Event) Decode(b []byte) error { return e.decode(b, false) }

// DecodeView is Decode without copying: e's strings alias b, so b must not
// change while e is in use — as a message's payload never does. The
// stateless queries decode each bid this way: copying its three strings
// costs a share of their CPU, for a row built from them at once.
func (e *Event) DecodeView(b []byte) error { return e.decode(b, true) }

func (e *Event) decode(b []byte, view bool) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty payload", ErrBadEvent)
	}
	d := decoder{b: b[1:], view: view}
	*e = Event{Kind: Kind(b[0])}
	switch e.Kind {
	case KindPerson:
		p := &e.Person
		p.ID = d.int()
		p.Name, p.Email, p.CreditCard, p.City, p.State = d.str(), d.str(), d.str(), d.str(), d.str()
		p.DateTime = d.int()
		p.Extra = d.str()
	case KindAuction:
		a := &e.Auction
		a.ID = d.int()
		a.ItemName, a.Description = d.str(), d.str()
		a.InitialBid, a.Reserve, a.DateTime, a.Expires, a.Seller, a.Category = d.int(), d.int(), d.int(), d.int(), d.int(), d.int()
		a.Extra = d.str()
	case KindBid:
		bd := &e.Bid
		bd.Auction, bd.Bidder, bd.Price = d.int(), d.int(), d.int()
		bd.Channel, bd.URL = d.str(), d.str()
		bd.DateTime = d.int()
		bd.Extra = d.str()
	default:
		return fmt.Errorf("%w: unknown kind byte %#x (want P, A or B)", ErrBadEvent, b[0])
	}
	if d.err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadEvent, e.Kind, d.err)
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %s: %d trailing bytes", ErrBadEvent, e.Kind, len(d.b))
	}
	return nil
}

type decoder struct {
	b    []byte
	err  error
	view bool // strings alias b
}

func (d *decoder) int() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errors.New("truncated or overlong integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	if d.err != nil {
		return ""
	}
	l, n := binary.Uvarint(d.b)
	if n <= 0 || l > uint64(len(d.b)-n) {
		d.err = errors.New("truncated string")
		return ""
	}
	raw := d.b[n : n+int(l)]
	d.b = d.b[n+int(l):]
	if d.view && len(raw) > 0 {
		return unsafe.String(&raw[0], len(raw))
	}
	return string(raw)
}
