package nexmark

import (
	"iter"
	"slices"

	"github.com/consumerd/consumerd/shard"
)

// Query is one Nexmark query as consumerd runs it: the apps of its stages,
// the topics between them, and its model.
type Query struct {
	// Name is "q0" … "q9".
	Name string
	// Title says what the query computes, in one line.
	Title string
	// Stages are the query's apps in pipeline order; each runs one shard per
	// partition of its first topic. The last publishes Output.
	Stages []shard.App
	// Topics are the topics the query's stages publish to (the last is
	// Output), with their partition counts.
	Topics []TopicSpec
	// Output is the topic of the query's result rows.
	Output string
	// Model computes the rows the query must output for the events, in any
	// order. It may keep an event only by copying it: the iterator reuses it.
	Model func(events iter.Seq[*Event]) []string
}

// TopicSpec is a topic a query creates.
type TopicSpec struct {
	Name string
	// Single is true for a topic of one partition. No query needs it: a
	// global aggregate's second stage (q5, q7) gets every candidate of a
	// window in one partition by keying them by the window, so its topic has
	// as many partitions as the sources, like every other — and so fits the
	// topics the embedded default creates (4 partitions each).
	Single bool
}

// Partitions is the topic's partition count when the sources have n.
func (t TopicSpec) Partitions(n int) int {
	if t.Single {
		return 1
	}
	return n
}

// Events iterates events 0 … n-1, reusing one Event.
func (g Generator) Events(n uint64) iter.Seq[*Event] {
	return func(yield func(*Event) bool) {
		var e Event
		for i := uint64(0); i < n; i++ {
			g.Event(i, &e)
			if !yield(&e) {
				return
			}
		}
	}
}

// queries is the registry, in query order: each query file adds its own.
var queries []Query

func register(q Query) {
	queries = append(queries, q)
	slices.SortFunc(queries, func(a, b Query) int { return compareNames(a.Name, b.Name) })
}

// compareNames orders "q2" before "q10".
func compareNames(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Queries returns every implemented query, in query order.
func Queries() []Query { return slices.Clone(queries) }

// Lookup returns the query named name.
func Lookup(name string) (Query, bool) {
	for _, q := range queries {
		if q.Name == name {
			return q, true
		}
	}
	return Query{}, false
}

// Apps returns the apps of every query's stages: what a daemon registers.
func Apps() []shard.App {
	var out []shard.App
	for _, q := range queries {
		out = append(out, q.Stages...)
	}
	return out
}
