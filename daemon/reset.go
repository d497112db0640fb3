package daemon

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	"github.com/consumerd/consumerd/shard"
)

func newShardsResetCommand(opts Options) *cobra.Command {
	var cf clientFlags
	var shardID string
	var yes bool
	cmd := &cobra.Command{
		Use:   "reset --shard ID --yes",
		Short: "Accept that a shard's recovery log lost records: rebuild the shard from what the log has",
		Long: `reset is the answer to a shard FAILED with "the recovery log is behind the
local database (it lost records)": the WAL lost data (its store was deleted,
a stream recreated, an old backup restored) that the shard's local databases
had applied. If the data can be restored, restore it and run
'consumerd shards unassign --failed --shard ID' instead.

reset accepts the loss. In one etcd transaction it sets the spec's
log_reset_term above every term so far, deletes the shard's snapshot
pointer (its snapshots describe the lost log) and unassigns its replicas.
The leader assigns the shard again; every replica whose local database is
ahead of the log and older than the reset moves that database aside (kept
under <data-dir>/damaged/) and rebuilds the shard from what the log has,
offsets included: sources are read again from the offsets found there (from
their start when the log is empty). Nothing is deleted but the pointer.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if shardID == "" {
				return usagef("--shard: required")
			}
			if !yes {
				return usagef("reset rebuilds shard %s from what its recovery log has, setting its local databases aside and forgetting its snapshots: run again with --yes to confirm", shardID)
			}
			ctx := cmd.Context()
			cli, snap, err := cf.snapshot(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			info, ok := snap.Items[shardID]
			spec, isSpec := info.Item.(*shard.Spec)
			if !ok || !isSpec || spec == nil {
				if e, bad := snap.InvalidItems[shardID]; bad {
					return fmt.Errorf("--shard: the spec of %s does not decode (%s): write a valid one with 'consumerd shards apply' first", shardID, e)
				}
				return fmt.Errorf("--shard: no shard %q", shardID)
			}
			// Every term so far is the term base plus a slot-0 key's
			// CreateRevision, at most snap.Revision; every later one is
			// above this txn's revision (and the base never goes down).
			base, err := allocator.Terms{Client: cli, Prefix: cf.etcdPrefix}.Base(ctx)
			if err != nil {
				return err
			}
			reset := *spec
			reset.LogResetTerm = base + snap.Revision + 1
			raw, err := json.Marshal(&reset)
			if err != nil {
				return fmt.Errorf("encoding shard %s: %w", shardID, err)
			}
			key := allocator.ItemKey(cf.etcdPrefix, shardID)
			cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", info.ModRevision)}
			ops := []clientv3.Op{clientv3.OpPut(key, string(raw)), clientv3.OpDelete(snapshot.PointerKey(cf.etcdPrefix, shardID))}
			var replicas int
			for _, a := range append(append([]allocator.Assignment(nil), snap.Assignments...), snap.Undecodable...) {
				if a.Item != shardID {
					continue
				}
				ak := allocator.AssignmentKey(cf.etcdPrefix, a)
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(ak), "=", a.ModRevision))
				ops = append(ops, clientv3.OpDelete(ak))
				replicas++
			}
			resp, err := cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
			if err != nil {
				return fmt.Errorf("resetting shard %s: %w", shardID, err)
			}
			if !resp.Succeeded {
				return fmt.Errorf("shard %s changed while resetting it (a failover?); nothing was written, try again", shardID)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "reset %s: log_reset_term %d, snapshot pointer removed, %d replica(s) unassigned; the shard is rebuilt from what its recovery log has\n",
				shardID, reset.LogResetTerm, replicas)
			return nil
		},
	}
	cf.bind(cmd.Flags())
	cmd.Flags().StringVar(&shardID, "shard", "", "the shard to reset (required)")
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm: the shard's local databases are set aside and its snapshots forgotten")
	return cmd
}
