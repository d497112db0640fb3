package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	"github.com/consumerd/consumerd/shard"
)

func newShardsResetCommand(opts Options) *cobra.Command {
	var cf clientFlags
	var shardID string
	var lostLog, yes bool
	cmd := &cobra.Command{
		Use:   "reset (--shard ID | --lost-log) --yes",
		Short: "Accept that a shard's recovery log lost records: rebuild the shard from what the log has",
		Long: `reset is the answer to a shard FAILED with "the recovery log is behind the
local database (it lost records)": the WAL lost data (its store was deleted,
a stream recreated, an old backup restored) that the shard's local databases
had applied. If the data can be restored, restore it and run
'consumerd shards unassign --failed --shard ID' instead.

reset accepts the loss. In one etcd transaction per shard it sets the spec's
log_reset_term above every term so far, deletes the shard's snapshot pointer
(its snapshots describe the lost log) and unassigns its replicas. The leader
assigns the shard again; every replica whose local database is ahead of the
log and older than the reset moves that database aside (kept under
<data-dir>/damaged/) and rebuilds the shard from what the log has, offsets
included: sources are read again from the offsets found there (from their
start when the log is empty). Nothing is deleted but the pointer.
  --shard ID    that shard
  --lost-log    every shard with a replica FAILED for that reason`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (shardID == "") == !lostLog {
				return usagef("give exactly one of --shard ID or --lost-log")
			}
			ctx := cmd.Context()
			cli, snap, err := cf.snapshot(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			ids := []string{shardID}
			if lostLog {
				ids = lostLogShards(snap)
				if len(ids) == 0 {
					fmt.Fprintln(cmd.OutOrStdout(), "no shard has a replica FAILED because its recovery log lost records")
					return nil
				}
			}
			if !yes {
				return usagef("reset rebuilds %d shard(s) (%s) from what their recovery logs have, setting their local databases aside and forgetting their snapshots: run again with --yes to confirm",
					len(ids), strings.Join(ids, ", "))
			}
			base, err := allocator.Terms{Client: cli, Prefix: cf.etcdPrefix}.Base(ctx)
			if err != nil {
				return err
			}
			for _, id := range ids {
				if err := resetShard(ctx, cli, cf.etcdPrefix, snap, base, id, cmd.OutOrStdout()); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cf.bind(cmd.Flags())
	cmd.Flags().StringVar(&shardID, "shard", "", "the shard to reset")
	cmd.Flags().BoolVar(&lostLog, "lost-log", false, "every shard with a replica FAILED because its recovery log lost records")
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm: the shards' local databases are set aside and their snapshots forgotten")
	return cmd
}

// lostLogShards are the shards with a replica FAILED on recoverylog.ErrLogBehind.
func lostLogShards(snap allocator.Snapshot) []string {
	seen := map[string]bool{}
	for _, a := range snap.Assignments {
		if a.Status.State == allocator.StateFailed && strings.Contains(a.Status.Error, recoverylog.ErrLogBehind.Error()) {
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

// resetShard resets shard id in one guarded txn (see the command's help).
func resetShard(ctx context.Context, cli *clientv3.Client, prefix string, snap allocator.Snapshot, base int64, id string, out io.Writer) error {
	info, ok := snap.Items[id]
	spec, isSpec := info.Item.(*shard.Spec)
	if !ok || !isSpec || spec == nil {
		if err := shardExists(snap, id); err != nil {
			return err
		}
		return fmt.Errorf("--shard: the spec of %s does not decode (%s): write a valid one with 'consumerd shards apply' first", id, snap.InvalidItems[id])
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
