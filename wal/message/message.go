package message

import (
	"fmt"
	"strconv"
	"time"
)

// MessageID is a message's offset within its channel. IDs are assigned by the
// backend on append, are strictly increasing within a channel, are never
// reused, and never go backwards across reopens or restarts. IDs need not be
// contiguous (a backend may spend ids on its own records). Zero means "none".
type MessageID uint64

// String renders the id in decimal.
func (id MessageID) String() string { return strconv.FormatUint(uint64(id), 10) }

// ParseMessageID parses a decimal MessageID.
func ParseMessageID(s string) (MessageID, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse message id %q: %w", s, err)
	}
	return MessageID(v), nil
}

// MutableMessage is a message that has not been appended yet.
type MutableMessage struct {
	// Key routes the message (topics hash it to pick a partition). May be empty.
	Key string
	// Payload is the message body, opaque to the WAL.
	Payload []byte
	// Properties are small string headers carried with the message.
	Properties map[string]string
	// DedupeID, when set, makes the append idempotent on backends that support
	// it: a second append with the same DedupeID within the backend's dedupe
	// window is acknowledged with the id of the first and not stored twice.
	DedupeID string
}

// Size is the number of bytes the message occupies on the wire, roughly.
func (m *MutableMessage) Size() int {
	n := len(m.Key) + len(m.Payload) + len(m.DedupeID)
	for k, v := range m.Properties {
		n += len(k) + len(v)
	}
	return n
}

// ImmutableMessage is a message read back from a channel.
type ImmutableMessage struct {
	// Channel is the name of the channel the message was read from.
	Channel string
	// ID is the message's offset in Channel.
	ID MessageID
	// Key, Payload and Properties are as appended.
	Key        string
	Payload    []byte
	Properties map[string]string
	// AppendTime is when the backend stored the message.
	AppendTime time.Time
}

// Size is the number of bytes the message occupies on the wire, roughly.
func (m *ImmutableMessage) Size() int {
	n := len(m.Key) + len(m.Payload)
	for k, v := range m.Properties {
		n += len(k) + len(v)
	}
	return n
}
