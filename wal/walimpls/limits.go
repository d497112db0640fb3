package walimpls

import (
	"errors"

	"github.com/consumerd/consumerd/wal/message"
)

// ErrMessageLimit is wrapped by the error of a message a channel can never
// store: larger than a limit of the channel or of its server. The error
// names the limit; it is marked Permanent (retrying sends the same bytes).
var ErrMessageLimit = errors.New("the message exceeds a limit of the channel")

// MessageChecker is optionally implemented by a WALImpls: CheckMessage says,
// without a round trip, whether the channel can ever store msg, also as a
// message of a batch (with the headers a batch adds): nil, or an error
// wrapping ErrMessageLimit, marked Permanent, that names the limit and the
// message's size. It may refuse a message within a few hundred bytes of a
// limit that a plain Append would store (a batch's headers are not known
// in advance); it never passes a message the limits it knows refuse. The
// limits are those the backend knew when the WAL was opened (a stream's
// configuration then) and its connection's now: a limit lowered later is
// found by the append, which fails permanently the same way.
//
// A writer that commits messages to publish later (a shard's outbox) checks
// them when they are staged, so a message that can never be published is
// refused to the application instead of wedging the publisher.
type MessageChecker interface {
	CheckMessage(msg *message.MutableMessage) error
}

// ErrNoChannel is wrapped by Open's error when OpenOption.NoCreate is set
// and the channel does not exist. It is not retryable: the channel stays
// absent until someone creates it.
var ErrNoChannel = errors.New("the channel does not exist")
