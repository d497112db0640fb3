package cli

import (
	"fmt"
	"sort"

	"github.com/spf13/cobra"

	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/shard"
)

func newShardsDeleteCommand(prog cmdline.Program) *cobra.Command {
	var cf connect.ClientFlags
	var shardID, appName string
	var all, yes bool
	cmd := &cobra.Command{
		Use:   "delete (--shard ID | --app A | --all) --yes",
		Short: "Delete shard specs: one shard, every shard of an app, or every shard",
		Long: `delete removes shard specs from etcd; their replicas are then released, and their
partitions are left unread (a WARNING names them). Their recovery logs and
snapshots stay in the WAL: a spec written again with the same id (shards apply)
picks the state up where it was.
  --shard ID   that shard (a spec that does not decode too)
  --app A      every shard of application A
  --all        every shard, of every application, valid or not
Writes are guarded transactions of at most 128 deletes; --yes confirms.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmdline.CountTrue(shardID != "")+cmdline.CountTrue(appName != "")+cmdline.CountTrue(all) != 1 {
				return cmdline.Usagef("give exactly one of --shard ID, --app A or --all")
			}
			ctx := cmd.Context()
			cli, snap, err := connectAndLoad(ctx, &cf)
			if err != nil {
				return err
			}
			defer cli.Close()
			var ids []string
			switch {
			case shardID != "":
				if err := cluster.ShardExists(snap, shardID); err != nil {
					return err
				}
				ids = []string{shardID}
			case appName != "":
				if _, err := prog.App(appName); err != nil {
					return cmdline.Usage(fmt.Errorf("--app: %w", err))
				}
				for _, s := range shard.Specs(snap) {
					if s.App == appName {
						ids = append(ids, s.ID)
					}
				}
				if len(snap.InvalidItems) > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "WARNING: %d shard spec(s) do not decode and may belong to %s; they are not deleted (use --shard ID): see 'consumerd shards list'\n",
						len(snap.InvalidItems), appName)
				}
			default:
				for id := range snap.Items {
					ids = append(ids, id)
				}
				for id := range snap.InvalidItems {
					ids = append(ids, id)
				}
			}
			sort.Strings(ids)
			if len(ids) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no shards to delete")
				return nil
			}
			if !yes {
				return cmdline.Usagef("this deletes %d shard spec(s) (%s%s): run again with --yes to confirm", len(ids), ids[0], map[bool]string{true: ", ...", false: ""}[len(ids) > 1])
			}
			entries := make([]cluster.SpecEntry, len(ids))
			for i, id := range ids {
				// Valid specs are guarded by the snapshot's revision; an
				// invalid one's is read again (the snapshot has no item).
				entries[i] = cluster.SpecEntry{ID: id, Delete: true, ModRevision: snap.Items[id].ModRevision}
			}
			_, _, deleted, err := cluster.WriteSpecs(ctx, cli, cf.EtcdPrefix, entries)
			if err != nil {
				return fmt.Errorf("after deleting %d shard(s): %w", deleted, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted %d shard(s)\n", deleted)
			if after, err := cluster.Load(ctx, cli, cf.EtcdPrefix); err == nil {
				if ts, err := topicsAt(cli, cf.EtcdPrefix).List(ctx); err == nil {
					cluster.WarnUnread(cmd.ErrOrStderr(), ts, shard.Specs(after))
				}
			}
			return nil
		},
	}
	cf.Bind(cmd.Flags())
	cmd.Flags().StringVar(&shardID, "shard", "", "delete this shard")
	cmd.Flags().StringVar(&appName, "app", "", "delete every shard of this application")
	cmd.Flags().BoolVar(&all, "all", false, "delete every shard")
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm the deletion")
	return cmd
}
