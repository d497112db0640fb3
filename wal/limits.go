package wal

import (
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// ErrMessageLimit, re-exported: a message exceeds a limit of its channel
// (walimpls.MessageChecker).
var ErrMessageLimit = walimpls.ErrMessageLimit

// ErrNoChannel, re-exported: Open with OpenOption.NoCreate found no channel.
var ErrNoChannel = walimpls.ErrNoChannel

// MessageChecker is implemented by every WAL this package returns:
// CheckMessage says, without a round trip, whether the channel can ever
// store msg (also in a batch): nil, or a permanent error wrapping
// ErrMessageLimit that names the limit (walimpls.MessageChecker). nil when
// the backend does not know its limits.
type MessageChecker interface {
	CheckMessage(msg *message.MutableMessage) error
}

var _ MessageChecker = (*walAdaptor)(nil)

// CheckMessage implements MessageChecker.
func (w *walAdaptor) CheckMessage(msg *message.MutableMessage) error {
	if c, ok := w.impl.(walimpls.MessageChecker); ok {
		return c.CheckMessage(msg)
	}
	return nil
}
