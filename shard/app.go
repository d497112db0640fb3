package shard

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/consumerd/consumerd/internal/ident"
)

// App is an application as the daemon registers it (one per --app name): a
// factory of Consumers plus how to read and merge its state for queries.
type App struct {
	// Name is the application's name; a shard spec's app field selects it.
	Name string
	// Topics are the topics the application consumes (the Consumer does not
	// name them: they are needed before one exists). A shard made by
	// SpecsFor reads the same partition index of every topic; a spec written
	// for `shards apply` may name any sources (see Shard.Partition).
	Topics []string
	// Outputs are the topics the application publishes to: `shards create`
	// requires them to exist, and the embedded default creates them.
	Outputs []string
	// NewConsumer returns a fresh Consumer for one shard primary. It is
	// called once each time a replica becomes primary; a Consumer is never
	// shared between shards.
	NewConsumer func() Consumer
	// Query returns one key's value on this shard (committed state).
	// Optional.
	Query func(s Shard, key string) (value string, ok bool, err error)
	// Scan calls fn for every key/value on this shard (committed state), in
	// key order, and stops at fn's first error. Optional.
	Scan func(s Shard, fn func(key, value string) error) error
	// Merge combines one key's values from two shards (wordcount: the sum).
	// Optional; without it a key found on several shards is an error.
	Merge func(a, b string) (string, error)
	// KeyedBy names the topic (one of Topics) whose partitioning places a
	// key: the app keeps key K only on the shards that read partition
	// topic.PartitionFor(K, N) of KeyedBy, N being that topic's partition
	// count (the hash publish routes by). A key query (`consumerd query
	// --key`, /v1/query?app=A&key=K) then asks only those shards. Set it
	// when the app's state for a key comes only from messages with that
	// key, e.g. a last-value-per-key store. Empty (wordcount: it counts a
	// token on every shard that saw it) means a key query asks every shard
	// of the app and merges the answers. Keys and values are strings
	// holding any bytes, UTF-8 or not.
	KeyedBy string
}

// Validate checks that the app can be registered.
func (a App) Validate() error {
	if err := ident.Check(a.Name); err != nil {
		return fmt.Errorf("app: name: %w", err)
	}
	if a.NewConsumer == nil {
		return fmt.Errorf("app %q: NewConsumer is nil", a.Name)
	}
	if len(a.Topics) == 0 {
		return fmt.Errorf("app %q: topics: must name at least one topic", a.Name)
	}
	for i, t := range a.Topics {
		if err := ident.Check(t); err != nil {
			return fmt.Errorf("app %q: topics[%d]: %w", a.Name, i, err)
		}
	}
	if a.KeyedBy != "" && !slices.Contains(a.Topics, a.KeyedBy) {
		return fmt.Errorf("app %q: keyed by %q: not one of its topics (%s)", a.Name, a.KeyedBy, strings.Join(a.Topics, ", "))
	}
	return nil
}

// SpecsFor returns n shard specs for the app, one per partition: shard i
// ("<app>-%04d") reads partition i of each of the app's topics. It is what
// `consumerd shards create --app A --count N` writes.
func (a App) SpecsFor(n, hotStandbys int) ([]*Spec, error) {
	if n <= 0 {
		return nil, errors.New("count: must be at least 1")
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	out := make([]*Spec, 0, n)
	for i := 0; i < n; i++ {
		s := &Spec{ID: fmt.Sprintf("%s-%04d", a.Name, i), App: a.Name, HotStandbys: hotStandbys}
		for _, t := range a.Topics {
			s.Sources = append(s.Sources, Source{Topic: t, Partition: i})
		}
		if err := s.Validate(); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
