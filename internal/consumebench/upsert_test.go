package consumebench

import (
	"encoding/binary"
	"fmt"

	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
)

// The realistic application's topics and key layout.
const (
	inputTopic  = "events"
	outputTopic = "upserts"
	keyPrefix   = "u/"
)

// upsert is the realistic application: for each message it reads the
// message key's record (a big-endian uint64 count, then the last payload),
// writes it back with the count incremented and the new payload, and
// publishes the new record to outputTopic at the shard's partition. With
// unique keys every Get misses both the transaction and the database — the
// read-modify-write a high-cardinality join or enrichment pays.
type upsert struct{}

func upsertApp() shard.App {
	return shard.App{
		Name: "upsert", Topics: []string{inputTopic}, Outputs: []string{outputTopic},
		NewConsumer: func() shard.Consumer { return upsert{} },
		Query: func(s shard.Shard, key string) (string, bool, error) {
			v, err := s.Get([]byte(keyPrefix + key))
			if err != nil || v == nil {
				return "", false, err
			}
			n, err := recordCount(v)
			return fmt.Sprint(n), err == nil, err
		},
		KeyedBy: inputTopic,
	}
}

func (upsert) Consume(s shard.Shard, env topic.Envelope, pub shard.Publisher) error {
	key := append([]byte(keyPrefix), env.Message.Key...)
	prev, err := s.Get(key)
	if err != nil {
		return err
	}
	rec, err := nextRecord(prev, env.Message.Payload)
	if err != nil {
		return fmt.Errorf("key %q: %w", env.Message.Key, err)
	}
	s.Transaction().Put(key, rec)
	return pub.PublishTo(topic.Partition{Topic: outputTopic, Index: env.Partition.Index},
		message.MutableMessage{Key: env.Message.Key, Payload: rec})
}

func (upsert) Flush(shard.Shard, shard.Publisher) error { return nil }

// nextRecord is the record after prev (nil: none) with payload: the count
// plus one, then payload. The raw loop computes the same bytes.
func nextRecord(prev, payload []byte) ([]byte, error) {
	n, err := recordCount(prev)
	if err != nil {
		return nil, err
	}
	rec := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint64(rec, n+1)
	copy(rec[8:], payload)
	return rec, nil
}

func recordCount(rec []byte) (uint64, error) {
	switch {
	case rec == nil:
		return 0, nil
	case len(rec) < 8:
		return 0, fmt.Errorf("stored record of %d bytes, want at least 8", len(rec))
	}
	return binary.BigEndian.Uint64(rec), nil
}
