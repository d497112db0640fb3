package pipeline

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

// Topics and app names of the pipeline.
const (
	Lines  = "lines"
	Tokens = "tokens"
	Totals = "totals"

	SplitName = "split"
	TallyName = "tally"

	// countPrefix prefixes a token's count in tally's database.
	countPrefix = "t/"
)

// Split returns the split stage: lines -> tokens, re-keyed by token.
func Split() shard.App {
	return shard.App{
		Name:        SplitName,
		Topics:      []string{Lines},
		Outputs:     []string{Tokens},
		NewConsumer: func() shard.Consumer { return splitter{} },
	}
}

type splitter struct{}

// Consume publishes each token of the line to tokens, keyed by the token.
func (splitter) Consume(_ shard.Shard, env topic.Envelope, pub shard.Publisher) error {
	for _, tok := range strings.Fields(string(env.Message.Payload)) {
		if err := pub.Publish(Tokens, message.MutableMessage{Key: tok, Payload: []byte(tok)}); err != nil {
			return err
		}
	}
	return nil
}

func (splitter) Flush(shard.Shard, shard.Publisher) error { return nil }

// Tally returns the tally stage: tokens -> a count per token, changes to
// totals.
func Tally() shard.App {
	return shard.App{
		Name:        TallyName,
		Topics:      []string{Tokens},
		Outputs:     []string{Totals},
		KeyedBy:     Tokens,
		NewConsumer: func() shard.Consumer { return tallier{} },
		Query:       query,
		Scan:        scan,
	}
}

type tallier struct{}

// counts is tally's cache: the new count of every token the open
// transaction touched.
type counts map[string]int64

// Consume counts one token occurrence.
func (tallier) Consume(s shard.Shard, env topic.Envelope, _ shard.Publisher) error {
	cache, _ := s.Cache().(counts)
	if cache == nil {
		cache = counts{}
		s.SetCache(cache)
	}
	tok := env.Message.Key
	n, ok := cache[tok]
	if !ok {
		v, err := s.Get([]byte(countPrefix + tok))
		if err != nil {
			return err
		}
		if n, err = parseCount(v); err != nil {
			return fmt.Errorf("token %q: %w", tok, err)
		}
	}
	cache[tok] = n + 1
	return nil
}

// Flush writes the changed counts and publishes them to totals.
func (tallier) Flush(s shard.Shard, pub shard.Publisher) error {
	cache, _ := s.Cache().(counts)
	if len(cache) == 0 {
		return nil
	}
	toks := make([]string, 0, len(cache))
	for tok := range cache {
		toks = append(toks, tok)
	}
	sort.Strings(toks)
	for _, tok := range toks {
		v := strconv.FormatInt(cache[tok], 10)
		s.Transaction().Put([]byte(countPrefix+tok), []byte(v))
		if err := pub.Publish(Totals, message.MutableMessage{Key: tok, Payload: []byte(v)}); err != nil {
			return err
		}
	}
	s.SetCache(make(counts, len(cache)))
	return nil
}

func parseCount(v []byte) (int64, error) {
	if v == nil {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad stored count %q", v)
	}
	return n, nil
}

func query(s shard.Shard, tok string) (string, bool, error) {
	v, err := s.Get([]byte(countPrefix + tok))
	if err != nil || v == nil {
		return "", false, err
	}
	return string(v), true, nil
}

func scan(s shard.Shard, fn func(key, value string) error) error {
	it := s.Database().NewIterator(s.ReadOptions())
	defer it.Close()
	prefix := []byte(countPrefix)
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		k, v := it.Key(), it.Value()
		key, val := string(bytes.TrimPrefix(k.Data(), prefix)), string(v.Data())
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

// Count is the reference model: each token's count over lines.
func Count(lines []string) map[string]int64 {
	out := map[string]int64{}
	for _, l := range lines {
		for _, tok := range strings.Fields(l) {
			out[tok]++
		}
	}
	return out
}
