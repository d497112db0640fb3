package windows

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
)

// MarkProperty is the message property that makes a message a watermark
// mark. Its value is "<sender>/<senders>/<time>" in decimal.
const MarkProperty = "consumerd-watermark"

// Mark is a watermark sent explicitly down a re-keyed stream: sender Sender
// of Senders upstream senders promises that every later message it sends to
// this partition has event time > Time. Time == MaxTime is end of input.
//
// Marks are needed because a partition fed by several upstream shards
// interleaves their messages, so event times there say nothing about what
// is still to come; only each sender knows its own progress.
type Mark struct {
	Sender, Senders int
	Time            int64
}

// String is the mark's property value, "<sender>/<senders>/<time>".
func (m Mark) String() string {
	return strconv.Itoa(m.Sender) + "/" + strconv.Itoa(m.Senders) + "/" + strconv.FormatInt(m.Time, 10)
}

// Message is the mark as a message: an empty payload and the one property
// MarkProperty. Its key is empty; send it with Publisher.PublishTo (or
// Broadcast), as a mark is meant for partitions, not for a key.
func (m Mark) Message() message.MutableMessage {
	return message.MutableMessage{Properties: map[string]string{MarkProperty: m.String()}}
}

// validate checks the sender fields. Senders is bounded by the most
// partitions a topic may have: senders are the shards reading the partitions
// of one upstream topic, and the bound keeps a corrupt mark from making a
// Tracker allocate a huge table.
func (m Mark) validate() error {
	switch {
	case m.Senders < 1 || m.Senders > topic.MaxPartitions:
		return fmt.Errorf("senders %d out of range [1, %d]", m.Senders, topic.MaxPartitions)
	case m.Sender < 0 || m.Sender >= m.Senders:
		return fmt.Errorf("sender %d out of range [0, %d)", m.Sender, m.Senders)
	}
	return nil
}

// MarkOf returns the mark msg carries. ok is false, with no error, when msg
// has no MarkProperty (it is data). A property that does not parse, or whose
// sender fields are out of range, is an error naming the message and the
// value (ok is then true: the message is not data either): a sender that
// cannot be identified cannot be waited for, so guessing would make the
// watermark wrong. The payload of a mark is ignored.
func MarkOf(msg message.ImmutableMessage) (m Mark, ok bool, err error) {
	v, ok := msg.Properties[MarkProperty]
	if !ok {
		return Mark{}, false, nil
	}
	m, err = parseMark(v)
	if err != nil {
		return Mark{}, true, fmt.Errorf("windows: message %d of %s: %w", msg.ID, msg.Channel, err)
	}
	return m, true, nil
}

// parseMark parses a MarkProperty value.
func parseMark(v string) (Mark, error) {
	parts := strings.Split(v, "/")
	if len(parts) != 3 {
		return Mark{}, fmt.Errorf("%s %q: want <sender>/<senders>/<time>, got %d field(s)", MarkProperty, v, len(parts))
	}
	sender, err := strconv.Atoi(parts[0])
	if err != nil {
		return Mark{}, fmt.Errorf("%s %q: sender: %w", MarkProperty, v, err)
	}
	senders, err := strconv.Atoi(parts[1])
	if err != nil {
		return Mark{}, fmt.Errorf("%s %q: senders: %w", MarkProperty, v, err)
	}
	ts, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return Mark{}, fmt.Errorf("%s %q: time: %w", MarkProperty, v, err)
	}
	m := Mark{Sender: sender, Senders: senders, Time: ts}
	if err := m.validate(); err != nil {
		return Mark{}, fmt.Errorf("%s %q: %w", MarkProperty, v, err)
	}
	return m, nil
}

// Broadcast stages m for every partition of topicName (pub.Partitions), so
// that every downstream shard hears from this sender. Call it in Flush after
// the transaction's window results were staged: outputs are published per
// partition in the order staged, so each result precedes the mark that
// covers it.
func Broadcast(pub shard.Publisher, topicName string, m Mark) error {
	n, err := pub.Partitions(topicName)
	if err != nil {
		return fmt.Errorf("windows: broadcast mark %s to %s: %w", m, topicName, err)
	}
	msg := m.Message() // the publisher copies it, so one serves every partition
	for p := 0; p < n; p++ {
		part := topic.Partition{Topic: topicName, Index: p}
		if err := pub.PublishTo(part, msg); err != nil {
			return fmt.Errorf("windows: broadcast mark %s to %s: %w", m, part, err)
		}
	}
	return nil
}
