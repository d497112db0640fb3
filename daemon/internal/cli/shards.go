package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/shard"
)

func newShardsCommand(prog cmdline.Program) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shards",
		Short: "Create, change, list and unassign shards",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newShardsCreateCommand(prog), newShardsApplyCommand(prog),
		newShardsListCommand(prog), newShardsUnassignCommand(prog), newShardsRecoverCommand(prog), newShardsResetCommand(prog), newShardsAcceptSourceCommand(prog), newShardsOutputsCommand(prog),
		newShardsDeleteCommand(prog))
	return cmd
}

func newShardsCreateCommand(prog cmdline.Program) *cobra.Command {
	var cf connect.ClientFlags
	var appName string
	var count, standbys int
	cmd := &cobra.Command{
		Use:   "create --app A [--count N] [--hot-standbys K]",
		Short: "Create one shard of an app per partition: shard i (<app>-%04d) reads partition i of each of the app's topics",
		Long: `create makes one shard per partition of the app's input topics, which must exist
(consumerd topics create) and have the same partition count: shard i (<app>-%04d)
reads partition i of each. --count, when given, must equal that count.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			app, err := prog.App(appName)
			if err != nil {
				return cmdline.Usage(fmt.Errorf("--app: %w", err))
			}
			countGiven := cmd.Flags().Changed("count")
			if countGiven && count < 1 {
				return cmdline.Usagef("--count: %d must be at least 1", count)
			}
			if standbys < 0 || standbys > shard.MaxHotStandbys {
				return cmdline.Usagef("--hot-standbys: %d must be in 0..%d", standbys, shard.MaxHotStandbys)
			}
			cli, err := cf.Etcd(cmd.Context())
			if err != nil {
				return err
			}
			defer cli.Close()
			n, err := cluster.AppPartitions(cmd.Context(), topicsAt(cli, cf.EtcdPrefix), app)
			if err != nil {
				return err
			}
			if countGiven && count != n {
				return cmdline.Usagef("--count: %d must equal the partition count of %s (%d): one shard per partition", count, strings.Join(app.Topics, ", "), n)
			}
			for _, t := range app.Outputs {
				if _, err := topicsAt(cli, cf.EtcdPrefix).Get(cmd.Context(), t); err != nil {
					return fmt.Errorf("app %s publishes to topic %s: %w", app.Name, t, err)
				}
			}
			specs, err := app.SpecsFor(n, standbys)
			if err != nil {
				return err
			}
			if err := cluster.CreateSpecs(cmd.Context(), cli, cf.EtcdPrefix, specs); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created %d shards: %s .. %s\n", len(specs), specs[0].ID, specs[len(specs)-1].ID)
			return nil
		},
	}
	cf.Bind(cmd.Flags())
	cmd.Flags().StringVar(&appName, "app", "", "application of the shards (required)")
	cmd.Flags().IntVar(&count, "count", 0, "number of shards: must equal the topics' partition count (default: that count)")
	cmd.Flags().IntVar(&standbys, "hot-standbys", 0, "hot standby replicas per shard")
	_ = cmd.MarkFlagRequired("app")
	return cmd
}

func newShardsApplyCommand(prog cmdline.Program) *cobra.Command {
	var cf connect.ClientFlags
	var file string
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create, update or delete shard specs from a YAML or JSON list ('-' reads stdin)",
		Long: `apply writes every spec of FILE to etcd: a spec whose id exists is replaced, a new
one is created. An entry {id: X, delete: true} deletes shard X (its replicas are
then released). The file is a YAML or JSON list of specs, each as 'shards list'
shows them in etcd:

  - id: wordcount-0000
    app: wordcount
    sources: [{topic: words, partition: 0}]
    hot_standbys: 1
    max_txn_duration: 1s
  - id: wordcount-0007
    delete: true

Every entry is validated before anything is written.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var data []byte
			var err error
			if file == "-" {
				data, err = io.ReadAll(cmd.InOrStdin())
			} else {
				data, err = os.ReadFile(file)
			}
			if err != nil {
				return fmt.Errorf("-f %s: %w", file, err)
			}
			entries, err := parseApplyFile(data, prog.AppMap())
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			cli, err := cf.Etcd(cmd.Context())
			if err != nil {
				return err
			}
			defer cli.Close()
			ts, err := topicsAt(cli, cf.EtcdPrefix).List(cmd.Context())
			if err != nil {
				return err
			}
			var specs []*shard.Spec
			for _, e := range entries {
				if e.Spec != nil {
					specs = append(specs, e.Spec)
				}
			}
			if err := cluster.CheckSources(ts, specs); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			created, updated, deleted, err := cluster.WriteSpecs(cmd.Context(), cli, cf.EtcdPrefix, entries)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "applied %s: %d created, %d updated, %d deleted\n", file, created, updated, deleted)
			return nil
		},
	}
	cf.Bind(cmd.Flags())
	cmd.Flags().StringVarP(&file, "file", "f", "", "YAML or JSON file of shard specs (required)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func newShardsUnassignCommand(prog cmdline.Program) *cobra.Command {
	var cf connect.ClientFlags
	var failed bool
	var shardID string
	cmd := &cobra.Command{
		Use:   "unassign [--failed] [--shard ID]",
		Short: "Remove replica assignments so the leader reassigns them (--failed: only FAILED ones)",
		Long: `unassign deletes assignment keys; the allocator leader then assigns the shard
again (a FAILED replica restarts, from its recovery log, possibly elsewhere).
  --failed            every FAILED replica
  --failed --shard X  the FAILED replicas of shard X
  --shard X           every replica of shard X (the shard restarts)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !failed && shardID == "" {
				return cmdline.Usagef("give --failed, --shard ID, or both")
			}
			ctx := cmd.Context()
			cli, snap, err := connectAndLoad(ctx, &cf)
			if err != nil {
				return err
			}
			defer cli.Close()
			if shardID != "" {
				if err := cluster.ShardExists(snap, shardID); err != nil {
					return err
				}
			}
			var targets []allocator.Assignment
			all := snap.Assignments
			if !failed { // keys whose value does not decode go too (Status is zero)
				all = append(append([]allocator.Assignment(nil), all...), snap.Undecodable...)
			}
			for _, a := range all {
				if shardID != "" && a.Item != shardID {
					continue
				}
				if failed && a.Status.State != allocator.StateFailed {
					continue
				}
				targets = append(targets, a)
			}
			n := 0
			for _, a := range targets {
				key := allocator.AssignmentKey(cf.EtcdPrefix, a)
				resp, err := cli.Txn(ctx).
					If(clientv3.Compare(clientv3.ModRevision(key), "=", a.ModRevision)).
					Then(clientv3.OpDelete(key)).Commit()
				if err != nil {
					return fmt.Errorf("unassigning %s: %w", key, err)
				}
				if resp.Succeeded {
					n++
					state := string(a.Status.State)
					if state == "" {
						state = "value did not decode"
					}
					fmt.Fprintf(cmd.OutOrStdout(), "unassigned %s slot %d from %s/%s (%s)\n", a.Item, a.Slot, a.Zone, a.Member, state)
				}
			}
			// A person restarted the FAILED replicas: an automatic restart
			// policy counts its attempts from zero again.
			reset := map[string]bool{}
			for _, a := range targets {
				if _, ok := snap.Restarts[a.Item]; ok && a.Status.State == allocator.StateFailed && !reset[a.Item] {
					reset[a.Item] = true
					if _, err := cli.Delete(ctx, allocator.RestartKey(cf.EtcdPrefix, a.Item)); err != nil {
						return fmt.Errorf("resetting %s's restart count (%s): %w", a.Item, allocator.RestartKey(cf.EtcdPrefix, a.Item), err)
					}
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d assignments removed\n", n)
			return nil
		},
	}
	cf.Bind(cmd.Flags())
	cmd.Flags().BoolVar(&failed, "failed", false, "only replicas in state FAILED")
	cmd.Flags().StringVar(&shardID, "shard", "", "only replicas of this shard")
	return cmd
}
