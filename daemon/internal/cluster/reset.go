package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	"github.com/consumerd/consumerd/shard"
)

// LostLogShards are the shards with a replica FAILED because their recovery
// log lost records: recoverylog.ErrLogBehind, or shard.ErrOutputsAhead (an
// output chain covers transactions the log no longer has).
func LostLogShards(snap allocator.Snapshot) []string {
	seen := map[string]bool{}
	for _, a := range snap.Assignments {
		if a.Status.State == allocator.StateFailed && (strings.Contains(a.Status.Error, recoverylog.ErrLogBehind.Error()) ||
			strings.Contains(a.Status.Error, shard.ErrOutputsAhead.Error())) {
			seen[a.Item] = true
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// ResetShard resets shard id in one guarded txn (see the command's help).
func ResetShard(ctx context.Context, cli *clientv3.Client, prefix string, snap allocator.Snapshot, base int64, id string, out io.Writer) error {
	info, spec, err := shardSpec(snap, id)
	if err != nil {
		return err
	}
	// Every term so far is the term base plus a slot-0 key's CreateRevision,
	// at most snap.Revision; every later one is above this txn's revision
	// (and the base never goes down).
	reset := *spec
	reset.LogResetTerm = base + snap.Revision + 1
	raw, err := json.Marshal(&reset)
	if err != nil {
		return fmt.Errorf("encoding shard %s: %w", id, err)
	}
	key := allocator.ItemKey(prefix, id)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", info.ModRevision)}
	ops := []clientv3.Op{clientv3.OpPut(key, string(raw)), clientv3.OpDelete(snapshot.PointerKey(prefix, id))}
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
		return fmt.Errorf("resetting shard %s: %w", id, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("shard %s changed while resetting it (a failover?); nothing of it was written, try again", id)
	}
	fmt.Fprintf(out, "reset %s: log_reset_term %d, snapshot pointer removed, %d replica(s) unassigned; the shard is rebuilt from what its recovery log has\n",
		id, reset.LogResetTerm, replicas)
	return nil
}
