package wordcount

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
)

const (
	// Name is the application's name (the --app flag, a spec's app field).
	Name = "wordcount"
	// InputTopic is the topic of lines to count.
	InputTopic = "words"
	// OutputTopic receives a token's new count each time a transaction
	// changed it: key = token, payload = decimal count.
	OutputTopic = "counts"
	// KeyPrefix prefixes a token's key in the shard database.
	KeyPrefix = "w/"
)

// App returns the wordcount application for registration with a daemon.
func App() shard.App {
	return shard.App{
		Name:        Name,
		Topics:      []string{InputTopic},
		Outputs:     []string{OutputTopic},
		NewConsumer: func() shard.Consumer { return &Consumer{} },
		Query:       Query,
		Scan:        Scan,
		Merge:       Merge,
	}
}

// Consumer counts tokens. Its cache (see counts) holds the counts touched by
// the open transaction; Flush writes them to the transaction and publishes
// them.
type Consumer struct{}

// counts is the shard cache: the new count of every token the open
// transaction touched.
type counts map[string]int64

var _ shard.Consumer = (*Consumer)(nil)

// Consume counts every whitespace-separated token of the message payload.
func (c *Consumer) Consume(s shard.Shard, env topic.Envelope, _ shard.Publisher) error {
	cache, _ := s.Cache().(counts)
	if cache == nil {
		cache = make(counts)
		s.SetCache(cache)
	}
	for _, tok := range strings.Fields(string(env.Message.Payload)) {
		n, ok := cache[tok]
		if !ok {
			v, err := s.Get([]byte(KeyPrefix + tok))
			if err != nil {
				return err
			}
			if n, err = decodeCount(v); err != nil {
				return fmt.Errorf("token %q: %w", tok, err)
			}
		}
		cache[tok] = n + 1
	}
	return nil
}

// Flush writes the touched counts to the transaction, publishes them to the
// output topic at the shard's partition (staged in the transaction: exactly
// once), and empties the cache.
func (c *Consumer) Flush(s shard.Shard, pub shard.Publisher) error {
	cache, _ := s.Cache().(counts)
	if len(cache) == 0 {
		return nil
	}
	tokens := make([]string, 0, len(cache))
	for tok := range cache {
		tokens = append(tokens, tok)
	}
	sort.Strings(tokens)
	txn := s.Transaction()
	for _, tok := range tokens {
		txn.Put([]byte(KeyPrefix+tok), []byte(strconv.FormatInt(cache[tok], 10)))
	}
	part := topic.Partition{Topic: OutputTopic, Index: outputPartition(s)}
	for _, tok := range tokens {
		if err := pub.PublishTo(part, message.MutableMessage{Key: tok, Payload: []byte(strconv.FormatInt(cache[tok], 10))}); err != nil {
			return fmt.Errorf("publish count of %q: %w", tok, err)
		}
	}
	s.SetCache(make(counts, len(cache)))
	return nil
}

// outputPartition is the partition of OutputTopic that s publishes to: the
// shard's partition, or, when its sources name several partitions
// (Partition is -1), the lowest of them, so that each shard's updates still
// go to one partition, in order.
func outputPartition(s shard.Shard) int {
	if p := s.Partition(); p >= 0 {
		return p
	}
	p := -1
	for _, src := range s.Spec().Sources {
		if p < 0 || src.Partition < p {
			p = src.Partition
		}
	}
	return p
}

func decodeCount(v []byte) (int64, error) {
	if v == nil {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad stored count %q", v)
	}
	return n, nil
}

// Query returns token's count on shard s.
func Query(s shard.Shard, token string) (string, bool, error) {
	v, err := s.Get([]byte(KeyPrefix + token))
	if err != nil {
		return "", false, err
	}
	if v == nil {
		return "", false, nil
	}
	return string(v), true, nil
}

// Scan calls fn with every token and its count on shard s, in token order.
func Scan(s shard.Shard, fn func(key, value string) error) error {
	it := s.Database().NewIterator(s.ReadOptions())
	defer it.Close()
	prefix := []byte(KeyPrefix)
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		k, v := it.Key(), it.Value()
		key := string(bytes.TrimPrefix(k.Data(), prefix))
		val := string(v.Data())
		k.Free()
		v.Free()
		if err := fn(key, val); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("scan shard %s: %w", s.ID(), err)
	}
	return nil
}

// Merge sums two counts of one token from different shards.
func Merge(a, b string) (string, error) {
	x, err := strconv.ParseInt(a, 10, 64)
	if err != nil {
		return "", fmt.Errorf("merge counts: %q is not a count", a)
	}
	y, err := strconv.ParseInt(b, 10, 64)
	if err != nil {
		return "", fmt.Errorf("merge counts: %q is not a count", b)
	}
	return strconv.FormatInt(x+y, 10), nil
}

// Count is the reference model of the application: the token counts of
// lines (what the shards' merged counts must equal).
func Count(lines []string) map[string]int64 {
	out := make(map[string]int64)
	for _, l := range lines {
		for _, tok := range strings.Fields(l) {
			out[tok]++
		}
	}
	return out
}
