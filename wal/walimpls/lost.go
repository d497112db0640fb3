package walimpls

import (
	"errors"
	"fmt"

	"github.com/consumerd/consumerd/wal/message"
)

// ErrChannelLost is wrapped by the error of a verifying scanner
// (ReadOption.Verify) whose channel no longer holds the position it reads
// after: the channel was removed or created again, went backwards (a store
// restored from an older copy), or lost messages after the position before
// they were read (a purge, retention limits). Going on would skip messages
// or read others under ids already consumed, so the scanner stops instead:
// never a silent skip. It is not retryable: the same position fails the
// same way until someone decides where to read from.
var ErrChannelLost = errors.New("the channel no longer holds the reader's position")

// LostError says what a verifying scanner found: the position it reads
// after and the life of the channel that position belongs to, against what
// the channel holds now. errors.Is(err, ErrChannelLost) holds.
type LostError struct {
	// Channel is the channel's name.
	Channel string
	// After is the reader's position: it consumed every message up to this
	// id (0: none).
	After message.MessageID
	// Incarnation is the life of the channel After belongs to ("": not
	// known).
	Incarnation string
	// Now is what the channel holds now (zero when Gone).
	Now Bounds
	// Gone: the channel does not exist (it was removed).
	Gone bool
}

// CheckPosition is the one rule of a verifying reader: nil when b still holds
// the position after in incarnation inc (Bounds.Holds), else a *LostError
// naming channel.
func CheckPosition(channel string, after message.MessageID, inc string, b Bounds) error {
	if b.Holds(after, inc) {
		return nil
	}
	return &LostError{Channel: channel, After: after, Incarnation: inc, Now: b}
}

// Unwrap makes errors.Is(err, ErrChannelLost) hold.
func (e *LostError) Unwrap() error { return ErrChannelLost }

// Reason says in words how the channel lost the position.
func (e *LostError) Reason() string {
	b := e.Now
	switch {
	case e.Gone:
		return "the channel was removed"
	case e.Incarnation != "" && b.Incarnation != "" && e.Incarnation != b.Incarnation:
		return "the channel was removed and created again (its ids started over)"
	case e.After > b.Last:
		return fmt.Sprintf("the channel went backwards: its last id is %d, below the position (a store restored from an older copy, or messages lost)", b.Last)
	case e.After+1 < b.First:
		return fmt.Sprintf("ids %d..%d were removed before they were read (a purge or retention limits)", e.After+1, b.First-1)
	}
	return "the channel no longer holds the position"
}

// Range renders what the channel holds now, for errors.
func (e *LostError) Range() string {
	if e.Gone {
		return "nothing (it does not exist)"
	}
	return RangeOf(e.Now)
}

// RangeOf renders b for errors and logs: its ids and its incarnation.
func RangeOf(b Bounds) string {
	ids := fmt.Sprintf("ids %d..%d", b.First, b.Last)
	if b.First > b.Last {
		ids = fmt.Sprintf("no message (last id %d)", b.Last)
	}
	return fmt.Sprintf("%s, incarnation %s", ids, incarnationText(b.Incarnation))
}

func incarnationText(inc string) string {
	if inc == "" {
		return "unknown"
	}
	return inc
}

func (e *LostError) Error() string {
	return fmt.Sprintf("channel %q: %v: %s; the reader is after id %d of incarnation %s, the channel holds %s",
		e.Channel, ErrChannelLost, e.Reason(), e.After, incarnationText(e.Incarnation), e.Range())
}
