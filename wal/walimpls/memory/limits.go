package memory

import (
	"fmt"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// Message limits (walimpls.MessageChecker): a store may bound a message's
// size, as a server's max_payload does, so that tests on the memory backend
// meet a message the channel can never take.

var _ walimpls.MessageChecker = (*wal)(nil)

// SetMaxMessageBytes bounds every later message of every opener built by b
// to n bytes (0: no bound): its key, payload and properties' names and
// values together. A larger append (also in a batch) fails permanently with
// walimpls.ErrMessageLimit.
func (b *Builder) SetMaxMessageBytes(n int) {
	b.st.maxBytes.Store(int64(n))
}

// messageBytes is what a message counts against the bound.
func messageBytes(msg *message.MutableMessage) int {
	n := len(msg.Key) + len(msg.Payload)
	for k, v := range msg.Properties {
		n += len(k) + len(v)
	}
	return n
}

// CheckMessage fails msg when it exceeds the store's bound.
func (w *wal) CheckMessage(msg *message.MutableMessage) error {
	max := w.st.maxBytes.Load()
	if max <= 0 {
		return nil
	}
	if n := int64(messageBytes(msg)); n > max {
		return walimpls.Permanent(fmt.Errorf("memory: channel %q: a message of %d bytes exceeds the store's max message bytes of %d: %w",
			w.ch.name, n, max, walimpls.ErrMessageLimit))
	}
	return nil
}
