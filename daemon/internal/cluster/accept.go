package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/shard"
)

// LostSources are the sources of shards with a replica FAILED because the
// source lost messages they had not read (shard.LostSourceIn), by shard.
func LostSources(snap allocator.Snapshot) map[string][]shard.Source {
	out := map[string][]shard.Source{}
	for _, a := range snap.Assignments {
		if a.Status.State != allocator.StateFailed {
			continue
		}
		if src, ok := shard.LostSourceIn(a.Status.Error); ok && !containsSource(out[a.Item], src) {
			out[a.Item] = append(out[a.Item], src)
		}
	}
	for _, srcs := range out {
		sort.Slice(srcs, func(i, j int) bool { return srcs[i].Channel() < srcs[j].Channel() })
	}
	return out
}

func containsSource(srcs []shard.Source, s shard.Source) bool {
	for _, x := range srcs {
		if x == s {
			return true
		}
	}
	return false
}

// AcceptSources writes resets, each replacing the spec's reset of the same
// source, into shard id's spec and unassigns its replicas, in one guarded
// txn (see `shards accept-source`): the primary the leader assigns next
// applies them. Each reset's Term must be above every term so far.
func AcceptSources(ctx context.Context, cli *clientv3.Client, prefix string, snap allocator.Snapshot, id string, resets []shard.SourceReset, out io.Writer) error {
	info, spec, err := shardSpec(snap, id)
	if err != nil {
		return err
	}
	next := *spec
	next.SourceResets = nil
	for _, r := range spec.SourceResets {
		if !resetsSource(resets, r) {
			next.SourceResets = append(next.SourceResets, r)
		}
	}
	next.SourceResets = append(next.SourceResets, resets...)
	replicas, err := replaceAndUnassign(ctx, cli, prefix, snap, info, &next, "accepting the sources")
	if err != nil {
		return err
	}
	for _, r := range resets {
		fmt.Fprintf(out, "accept-source %s %s: reads after id %d (from %s) of incarnation %s, term %d\n",
			id, r.Channel(), r.After, r.From, r.Incarnation, r.Term)
	}
	fmt.Fprintf(out, "accept-source %s: %d replica(s) unassigned; the next primary reads on from there\n", id, replicas)
	return nil
}

// resetsSource reports whether resets hold a reset of r's source.
func resetsSource(resets []shard.SourceReset, r shard.SourceReset) bool {
	for _, x := range resets {
		if x.Topic == r.Topic && x.Partition == r.Partition {
			return true
		}
	}
	return false
}

// replaceAndUnassign writes next as the spec of its shard (info is the
// spec's entry in snap) and deletes the shard's assignments, in one txn
// guarded by the revisions snap read (what is the action, for errors): the
// primary the leader assigns next starts from the new spec. It returns how
// many replicas it unassigned.
func replaceAndUnassign(ctx context.Context, cli *clientv3.Client, prefix string, snap allocator.Snapshot, info allocator.ItemInfo, next *shard.Spec, what string) (int, error) {
	if err := next.Validate(); err != nil {
		return 0, err
	}
	id := next.ID
	raw, err := json.Marshal(next)
	if err != nil {
		return 0, fmt.Errorf("encoding shard %s: %w", id, err)
	}
	key := allocator.ItemKey(prefix, id)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", info.ModRevision)}
	ops := []clientv3.Op{clientv3.OpPut(key, string(raw))}
	var replicas int
	for _, a := range append(append([]allocator.Assignment(nil), snap.Assignments...), snap.Undecodable...) {
		if a.Item != id {
			continue
		}
		ak := allocator.AssignmentKey(prefix, a)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(ak), "=", a.ModRevision))
		ops = append(ops, clientv3.OpDelete(ak))
		replicas++
	}
	resp, err := cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return 0, fmt.Errorf("%s of shard %s: %w", what, id, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("shard %s changed while %s (a failover?); nothing of it was written, try again", id, what)
	}
	return replicas, nil
}

// shardSpec is shard id's item and decoded spec in snap: an error naming
// the shard when it does not exist or its spec does not decode (the
// commands that rewrite a spec cannot start from one).
func shardSpec(snap allocator.Snapshot, id string) (allocator.ItemInfo, *shard.Spec, error) {
	info, ok := snap.Items[id]
	spec, isSpec := info.Item.(*shard.Spec)
	if !ok || !isSpec || spec == nil {
		if err := ShardExists(snap, id); err != nil {
			return info, nil, err
		}
		return info, nil, fmt.Errorf("--shard: the spec of %s does not decode (%s): write a valid one with 'consumerd shards apply' first", id, snap.InvalidItems[id])
	}
	return info, spec, nil
}
