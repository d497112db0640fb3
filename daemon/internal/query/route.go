package query

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
)

// ErrIncomplete marks an answer that would be built from fewer shards than
// the app has (Route.Incomplete).
var ErrIncomplete = errors.New("the answer may be partial")

// TopicLookup reads a topic's description (its partition count places a
// key); an unknown topic is an error naming it.
type TopicLookup func(ctx context.Context, name string) (topic.Description, error)

// Route is the set of shards a query asks, and why.
type Route struct {
	// Shards are the shard ids to ask, sorted.
	Shards []string
	// Topic and Partition are, for a key query of an app keyed by a topic
	// (App.KeyedBy), the partition that places the key; Topic is "" when
	// the query fans out to every shard of the app.
	Topic     string
	Partition int
	// Invalid are the shards whose spec in etcd does not decode, each as
	// the decode error naming the shard: their app is unknown, so an answer may be missing their
	// state (see Incomplete).
	Invalid []string
}

// Incomplete is the rule that an answer built from fewer shards than exist
// is an error: it returns nil when no shard spec is invalid, and otherwise
// an error naming the invalid shards and what to do. Callers that were asked
// for a partial answer print it as a warning instead.
func (r Route) Incomplete() error {
	if len(r.Invalid) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d shard spec(s) in etcd do not decode, so their shards are not running and were not asked: %s; "+
		"write a valid spec with 'consumerd shards apply' (or delete the key)",
		ErrIncomplete, len(r.Invalid), strings.Join(r.Invalid, "; "))
}

// String says which shards the route asks, for messages.
func (r Route) String() string {
	if r.Topic == "" {
		return fmt.Sprintf("asked all %d shard(s)", len(r.Shards))
	}
	return fmt.Sprintf("asked %s: it reads partition %d of topic %s, where publish places the key", strings.Join(r.Shards, ", "), r.Partition, r.Topic)
}

// RouteFor is the one routing rule of key and scan queries, used by the
// CLI (`consumerd query`) and the member's own fan-out (/v1/query without
// shard=): a key query of an app keyed by a topic (App.KeyedBy) asks only
// the enabled shards that read partition topic.PartitionFor(key, N) of that
// topic, N from the topic's record in etcd (the same hash publish routes
// by); every other query asks every enabled shard of the app.
func RouteFor(ctx context.Context, topics TopicLookup, snap allocator.Snapshot, app shard.App, key string, all bool) (Route, error) {
	var every, owners, disabled []string
	var r Route
	for id, e := range snap.InvalidItems {
		if !strings.Contains(e, id) {
			e = fmt.Sprintf("shard %s: %s", id, e)
		}
		r.Invalid = append(r.Invalid, e)
	}
	sort.Strings(r.Invalid)
	if !all && app.KeyedBy != "" {
		d, err := topics(ctx, app.KeyedBy)
		if err != nil {
			return Route{}, fmt.Errorf("app %s is keyed by topic %s: %w", app.Name, app.KeyedBy, err)
		}
		r.Topic, r.Partition = d.Name, topic.PartitionFor(key, d.Partitions)
	}
	for _, sp := range shard.Specs(snap) { // sorted by id
		if sp.App != app.Name {
			continue
		}
		reads := false
		for _, src := range sp.Sources {
			reads = reads || (src.Topic == r.Topic && src.Partition == r.Partition)
		}
		if sp.Disable {
			if reads {
				disabled = append(disabled, sp.ID)
			}
			continue
		}
		every = append(every, sp.ID)
		if reads {
			owners = append(owners, sp.ID)
		}
	}
	if len(every) == 0 {
		if err := r.Incomplete(); err != nil {
			return Route{}, fmt.Errorf("app %s has no valid shards: %w", app.Name, err)
		}
		return Route{}, fmt.Errorf("app %s has no shards", app.Name)
	}
	if r.Topic == "" {
		r.Shards = every
		return r, nil
	}
	if len(owners) == 0 {
		if len(disabled) > 0 {
			return Route{}, fmt.Errorf("key %s is placed in partition %d of topic %s, which only disabled shard(s) %s of app %s read",
				api.DescribeKey(key), r.Partition, r.Topic, strings.Join(disabled, ", "), app.Name)
		}
		return Route{}, fmt.Errorf("key %s is placed in partition %d of topic %s, which no shard of app %s reads",
			api.DescribeKey(key), r.Partition, r.Topic, app.Name)
	}
	r.Shards = owners
	return r, nil
}
