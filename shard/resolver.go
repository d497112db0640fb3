package shard

import (
	"fmt"

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

// Specs returns the shard specs of snap, sorted by id. An item that the
// snapshot's KeySpace did not decode as a *Spec is decoded from its raw
// value; one that is not a valid spec is left out. It and PrimaryOf are the
// lookups behind Resolver, and what the daemon's client commands use on a
// snapshot they loaded themselves.
func Specs(snap allocator.Snapshot) []*Spec {
	out := make([]*Spec, 0, len(snap.Items))
	for id, it := range snap.Items {
		if s, ok := it.Item.(*Spec); ok && s != nil {
			out = append(out, s)
			continue
		}
		if s, err := decodeSpec(id, it.Raw); err == nil {
			out = append(out, s)
		}
	}
	SortSpecs(out)
	return out
}

// PrimaryOf returns shard shardID's slot-0 assignment in snap and the
// endpoint its member announced. ok is false when the shard has no slot-0
// assignment; endpoint is "" when the member's key is gone (its lease is
// expiring) or it announced none.
func PrimaryOf(snap allocator.Snapshot, shardID string) (a allocator.Assignment, endpoint string, ok bool) {
	for _, asg := range snap.Assignments {
		if asg.Item != shardID || asg.Slot != 0 {
			continue
		}
		for _, m := range snap.Members {
			if m.Zone == asg.Zone && m.ID == asg.Member {
				return asg, m.Spec.Endpoint, true
			}
		}
		return asg, "", true
	}
	return allocator.Assignment{}, "", false
}

func resolve(snap allocator.Snapshot, app, topicName string, partitions int, key string) (string, string, error) {
	if partitions <= 0 {
		return "", "", fmt.Errorf("resolve %q in topic %q: partitions must be at least 1, got %d", key, topicName, partitions)
	}
	p := topic.PartitionFor(key, partitions)
	var owners []string // sorted: Specs is
	for _, s := range Specs(snap) {
		if app != "" && s.App != app {
			continue
		}
		for _, src := range s.Sources {
			if src.Topic == topicName && src.Partition == p {
				owners = append(owners, s.ID)
				break
			}
		}
	}
	switch len(owners) {
	case 0:
		return "", "", fmt.Errorf("resolve %q: no shard consumes %s", key, topic.ChannelName(topicName, p))
	case 1:
	default:
		return "", "", fmt.Errorf("resolve %q: several shards consume %s: %v (name the app)", key, topic.ChannelName(topicName, p), owners)
	}
	_, ep, _ := PrimaryOf(snap, owners[0])
	if ep == "" {
		return owners[0], "", fmt.Errorf("resolve %q: shard %s has no primary", key, owners[0])
	}
	return owners[0], ep, nil
}

func primaries(snap allocator.Snapshot, app string) map[string]string {
	out := make(map[string]string)
	for _, s := range Specs(snap) {
		if s.App != app || s.Disable {
			continue
		}
		_, out[s.ID], _ = PrimaryOf(snap, s.ID)
	}
	return out
}
