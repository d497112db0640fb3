package shard

import (
	"fmt"
	"sort"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/topic"
)

// Resolver maps keys and apps to shards and their primaries' endpoints,
// from the allocator's mirror of etcd. It holds no state of its own: every
// call reads a fresh snapshot.
type Resolver struct {
	ks *allocator.KeySpace
}

// NewResolver returns a resolver over ks (a member's KeySpace, or one a
// client loaded).
func NewResolver(ks *allocator.KeySpace) *Resolver { return &Resolver{ks: ks} }

// Resolve finds the shard that owns key in topic (partition
// topic.PartitionFor(key, partitions)) and its primary's endpoint. It fails
// when no shard sources that partition, when several apps' shards do (use
// ResolveApp), or when the shard has no primary.
func (r *Resolver) Resolve(topicName string, partitions int, key string) (shardID, memberEndpoint string, err error) {
	return resolve(r.ks.Snapshot(), "", topicName, partitions, key)
}

// ResolveApp is Resolve restricted to the shards of app.
func (r *Resolver) ResolveApp(app, topicName string, partitions int, key string) (shardID, memberEndpoint string, err error) {
	return resolve(r.ks.Snapshot(), app, topicName, partitions, key)
}

// Primaries maps each shard of app to its primary's endpoint. A shard with
// no primary assigned maps to "" so callers can tell a result is
// incomplete.
func (r *Resolver) Primaries(app string) map[string]string {
	return primaries(r.ks.Snapshot(), app)
}

// snapshotSpecs returns the shard specs of a snapshot, by id.
func snapshotSpecs(snap allocator.Snapshot) map[string]*Spec {
	out := make(map[string]*Spec, len(snap.Items))
	for id, it := range snap.Items {
		if s, ok := it.Item.(*Spec); ok {
			out[id] = s
			continue
		}
		if s, err := decodeSpec(id, it.Raw); err == nil {
			out[id] = s
		}
	}
	return out
}

// primaryEndpoint returns the endpoint of shard's slot-0 member, or "".
func primaryEndpoint(snap allocator.Snapshot, shardID string) string {
	for _, a := range snap.Assignments {
		if a.Item != shardID || a.Slot != 0 {
			continue
		}
		for _, m := range snap.Members {
			if m.Zone == a.Zone && m.ID == a.Member {
				return m.Spec.Endpoint
			}
		}
	}
	return ""
}

func resolve(snap allocator.Snapshot, app, topicName string, partitions int, key string) (string, string, error) {
	if partitions <= 0 {
		return "", "", fmt.Errorf("resolve %q in topic %q: partitions must be at least 1, got %d", key, topicName, partitions)
	}
	p := topic.PartitionFor(key, partitions)
	var owners []string
	for id, s := range snapshotSpecs(snap) {
		if app != "" && s.App != app {
			continue
		}
		for _, src := range s.Sources {
			if src.Topic == topicName && src.Partition == p {
				owners = append(owners, id)
				break
			}
		}
	}
	sort.Strings(owners)
	switch len(owners) {
	case 0:
		return "", "", fmt.Errorf("resolve %q: no shard consumes %s", key, topic.ChannelName(topicName, p))
	case 1:
	default:
		return "", "", fmt.Errorf("resolve %q: several shards consume %s: %v (name the app)", key, topic.ChannelName(topicName, p), owners)
	}
	ep := primaryEndpoint(snap, owners[0])
	if ep == "" {
		return owners[0], "", fmt.Errorf("resolve %q: shard %s has no primary", key, owners[0])
	}
	return owners[0], ep, nil
}

func primaries(snap allocator.Snapshot, app string) map[string]string {
	out := make(map[string]string)
	for id, s := range snapshotSpecs(snap) {
		if s.App != app || s.Disable {
			continue
		}
		out[id] = primaryEndpoint(snap, id)
	}
	return out
}
