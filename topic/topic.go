package topic

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/consumerd/consumerd/internal/ident"
	"github.com/consumerd/consumerd/wal/message"
)

// MaxPartitions bounds a topic's partition count (channel names carry four
// digits of partition index).
const MaxPartitions = 10000

// Description names a topic and its partition count.
type Description struct {
	Name       string `json:"name"`
	Partitions int    `json:"partitions"`
}

// Validate checks the name (consumerd's id rule, internal/ident) and that
// Partitions is in [1, MaxPartitions].
func (d Description) Validate() error {
	if err := checkName(d.Name); err != nil {
		return err
	}
	if d.Partitions < 1 || d.Partitions > MaxPartitions {
		return fmt.Errorf("topic %q: partitions %d out of range [1, %d]", d.Name, d.Partitions, MaxPartitions)
	}
	return nil
}

// checkName checks a topic name with consumerd's one id rule
// (internal/ident): the name is part of every channel name, so a '/' in it
// would make channel names ambiguous.
func checkName(name string) error {
	if err := ident.Check(name); err != nil {
		return fmt.Errorf("topic name: %w", err)
	}
	return nil
}

// ChannelName is the WAL channel of a topic partition: "<topic>/%04d".
func ChannelName(topicName string, partition int) string {
	return fmt.Sprintf("%s/%04d", topicName, partition)
}

// ParseChannelName splits a channel name made by ChannelName. It fails,
// naming what is wrong, on anything else (including recovery-log channels).
func ParseChannelName(ch string) (topicName string, partition int, err error) {
	i := strings.LastIndexByte(ch, '/')
	if i < 0 {
		return "", 0, fmt.Errorf("channel %q is not a topic partition: no '/' before the partition index", ch)
	}
	topicName, idx := ch[:i], ch[i+1:]
	if err := checkName(topicName); err != nil {
		return "", 0, fmt.Errorf("channel %q: %w", ch, err)
	}
	if len(idx) < 4 {
		return "", 0, fmt.Errorf("channel %q: partition index %q has fewer than 4 digits", ch, idx)
	}
	for _, r := range idx {
		if r < '0' || r > '9' {
			return "", 0, fmt.Errorf("channel %q: partition index %q is not decimal digits", ch, idx)
		}
	}
	p, err := strconv.Atoi(idx)
	if err != nil || p >= MaxPartitions {
		return "", 0, fmt.Errorf("channel %q: partition index %q out of range [0, %d)", ch, idx, MaxPartitions)
	}
	if ChannelName(topicName, p) != ch {
		return "", 0, fmt.Errorf("channel %q: partition index %q is not in canonical form %04d", ch, idx, p)
	}
	return topicName, p, nil
}

// Partition is one partition of a topic.
type Partition struct {
	Topic string `json:"topic"`
	Index int    `json:"partition"`
}

// Channel is the partition's WAL channel name.
func (p Partition) Channel() string { return ChannelName(p.Topic, p.Index) }

// String is the channel name.
func (p Partition) String() string { return p.Channel() }

// Envelope is a message read from a topic partition.
type Envelope struct {
	Partition Partition
	Message   message.ImmutableMessage
}

// PartitionFor maps a key to a partition in [0, partitions): FNV-1a (32 bit)
// of the key, modulo partitions. It is stable across processes and releases;
// changing it would re-route keys. partitions < 1 yields 0.
func PartitionFor(key string, partitions int) int {
	if partitions <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(partitions))
}
