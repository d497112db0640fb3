package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/daemon/internal/connect"
)

func newShardsResetCommand(prog cmdline.Program) *cobra.Command {
	var cf connect.ClientFlags
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

reset is also the answer to a shard FAILED with "an output chain covers
transactions beyond the shard's own last one": its log lost transactions
whose outputs were published, and new ones would be numbered like them. After
the reset the shard publishes its new transactions on a new marker chain (the
lost ones' outputs stay published; outputs of the inputs read again may go
out twice).
  --shard ID    that shard
  --lost-log    every shard with a replica FAILED for either reason`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (shardID == "") == !lostLog {
				return cmdline.Usagef("give exactly one of --shard ID or --lost-log")
			}
			ctx := cmd.Context()
			cli, snap, err := connectAndLoad(ctx, &cf)
			if err != nil {
				return err
			}
			defer cli.Close()
			ids := []string{shardID}
			if lostLog {
				ids = cluster.LostLogShards(snap)
				if len(ids) == 0 {
					fmt.Fprintln(cmd.OutOrStdout(), "no shard has a replica FAILED because its recovery log lost records")
					return nil
				}
			}
			if !yes {
				return cmdline.Usagef("reset rebuilds %d shard(s) (%s) from what their recovery logs have, setting their local databases aside and forgetting their snapshots: run again with --yes to confirm",
					len(ids), strings.Join(ids, ", "))
			}
			base, err := allocator.Terms{Client: cli, Prefix: cf.EtcdPrefix}.Base(ctx)
			if err != nil {
				return err
			}
			for _, id := range ids {
				if err := cluster.ResetShard(ctx, cli, cf.EtcdPrefix, snap, base, id, cmd.OutOrStdout()); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cf.Bind(cmd.Flags())
	cmd.Flags().StringVar(&shardID, "shard", "", "the shard to reset")
	cmd.Flags().BoolVar(&lostLog, "lost-log", false, "every shard with a replica FAILED because its recovery log lost records")
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm: the shards' local databases are set aside and their snapshots forgotten")
	return cmd
}
