package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/linxGnu/grocksdb"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/internal/ident"
	"github.com/consumerd/consumerd/shard"
)

// outputsFlags are the flags of `shards outputs`.
type outputsFlags struct {
	cf      connect.ClientFlags
	shardID string
	drop    string
	yes     bool
	output  string
	snapDir string
}

func newShardsOutputsCommand(prog cmdline.Program) *cobra.Command {
	var f outputsFlags
	cmd := &cobra.Command{
		Use:   "outputs --shard ID [--drop TXN[:INDEX] --yes]",
		Short: "List a shard's committed outputs not yet published; drop one that can never be published",
		Long: `outputs lists the outputs shard ID committed that are not published yet: each
as TXN:INDEX (its transaction's outbox number and its index among the
transaction's outputs), its topic and partition, its size in bytes (key,
payload and properties) and its key. It reads the shard's state as a new
replica builds it (the newest snapshot, then the recovery log: as 'shards
recover'), into a temporary directory; the shard keeps running.

--drop is the answer to a shard FAILED because an output can never be
published (a message over a limit of its stream, a deleted output topic):
it writes the drop into the shard's spec, with a term above every term so
far, and unassigns the shard's replicas, in one etcd transaction. The next
primary rewrites the transaction's outputs without the dropped ones,
records the drop in the shard's state (it holds across failovers; a WARN
log line and the consumerd_shard_outputs_dropped_total metric count each
output dropped) and publishes the rest. A dropped output is never
published. --drop TXN drops every output of the transaction.
Without --yes, outputs says what would be dropped and changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd, prog) },
	}
	f.cf.Bind(cmd.Flags())
	cmd.Flags().StringVar(&f.shardID, "shard", "", "the shard (required)")
	cmd.Flags().StringVar(&f.drop, "drop", "", "drop output TXN:INDEX (or every output of TXN)")
	cmd.Flags().BoolVar(&f.yes, "yes", false, "confirm the drop: the output is never published")
	cmd.Flags().StringVarP(&f.output, "output", "o", "table", "output format of the list: table or json")
	cmd.Flags().StringVar(&f.snapDir, "snapshot.dir", "", "read snapshots from this directory store instead of the JetStream object store")
	return cmd
}

func (f *outputsFlags) run(cmd *cobra.Command, prog cmdline.Program) error {
	if f.shardID == "" {
		return cmdline.Usagef("--shard: required")
	}
	if err := ident.Check(f.shardID); err != nil {
		return cmdline.Usagef("--shard: %v", err)
	}
	var drop shard.OutputDrop
	if f.drop != "" {
		var err error
		if drop.Txn, drop.Index, err = shard.ParseOutputRef(f.drop); err != nil {
			return cmdline.Usagef("--drop: %v", err)
		}
	} else if f.yes {
		return cmdline.Usagef("--yes: only with --drop")
	}
	if f.output != "table" && f.output != "json" {
		return cmdline.Usagef("--output: want table or json, got %q", f.output)
	}
	ctx := cmd.Context()
	cli, snap, err := connectAndLoad(ctx, &f.cf)
	if err != nil {
		return err
	}
	defer cli.Close()
	if err := cluster.ShardExists(snap, f.shardID); err != nil {
		return err
	}
	rep, err := f.readOutbox(ctx, cli, prog)
	if err != nil {
		return err
	}
	if f.drop == "" {
		if len(rep.Pending) > 0 && primaryRunning(snap, f.shardID) {
			fmt.Fprintf(cmd.ErrOrStderr(), "note: shard %s's primary is running: it records what it published with its next commit, "+
				"so the newest outputs listed may be out already; an output that cannot be published fails the shard with the reason\n", f.shardID)
		}
		if f.output == "json" {
			return json.NewEncoder(cmd.OutOrStdout()).Encode(rep.Pending)
		}
		return writeOutputs(cmd.OutOrStdout(), rep.Pending)
	}
	return f.dropOutput(ctx, cmd, cli, snap, rep, drop)
}

// readOutbox rebuilds the shard's state in a temporary directory and reads
// its outbox.
func (f *outputsFlags) readOutbox(ctx context.Context, cli *clientv3.Client, prog cmdline.Program) (shard.OutboxReport, error) {
	dir, err := os.MkdirTemp("", "consumerd-outputs-")
	if err != nil {
		return shard.OutboxReport{}, err
	}
	defer os.RemoveAll(dir)
	res, err := rebuildShard(ctx, &f.cf, cli, prog, f.shardID, dir, f.snapDir)
	if err != nil {
		return shard.OutboxReport{}, err
	}
	if res.Manifest == nil && res.Position.Seq == 0 {
		return shard.OutboxReport{}, nil // nothing committed yet
	}
	opts, release, err := recoverDBOptions(ctx, cli, f.cf.EtcdPrefix, f.shardID, prog)
	if err != nil {
		return shard.OutboxReport{}, err
	}
	defer release()
	db, err := grocksdb.OpenDbForReadOnly(opts, dir, false)
	if err != nil {
		return shard.OutboxReport{}, fmt.Errorf("open the rebuilt state of shard %s: %w", f.shardID, err)
	}
	defer db.Close()
	rep, err := shard.ReadOutbox(db)
	if err != nil {
		return rep, fmt.Errorf("shard %s: %w", f.shardID, err)
	}
	return rep, nil
}

// dropOutput checks that drop names pending outputs and, with --yes,
// writes it.
func (f *outputsFlags) dropOutput(ctx context.Context, cmd *cobra.Command, cli *clientv3.Client, snap allocator.Snapshot, rep shard.OutboxReport, drop shard.OutputDrop) error {
	spec, _ := snap.Items[f.shardID].Item.(*shard.Spec)
	if spec != nil {
		for _, d := range spec.OutputDrops {
			if d.Term > rep.DropTerm {
				return fmt.Errorf("shard %s: drop %s (term %d) is not applied yet (the shard's state has term %d): wait for its primary, then list again (indexes change once it applies)",
					f.shardID, d, d.Term, rep.DropTerm)
			}
		}
	}
	var hit []string
	for _, p := range rep.Pending {
		if p.Txn == drop.Txn && (drop.Index == nil || *drop.Index == p.Index) {
			hit = append(hit, fmt.Sprintf("%s (topic %s partition %d, %d bytes, key %q)", p.Ref(), p.Topic, p.Partition, p.Bytes, p.Key))
		}
	}
	if len(hit) == 0 {
		return cmdline.Usagef("--drop %s: shard %s has no such pending output (every txn up to %d is published; 'consumerd shards outputs --shard %s' lists the pending ones)",
			drop, f.shardID, rep.Published, f.shardID)
	}
	if !f.yes {
		return cmdline.Usagef("this drops %s of shard %s: %s; it is never published: run again with --yes to confirm",
			plural(len(hit), "output"), f.shardID, strings.Join(hit, ", "))
	}
	base, err := allocator.Terms{Client: cli, Prefix: f.cf.EtcdPrefix}.Base(ctx)
	if err != nil {
		return err
	}
	// Above every term given out so far (as accept-source's), so above the
	// drop term any state recorded.
	drop.Term = base + snap.Revision + 1
	return cluster.DropOutput(ctx, cli, f.cf.EtcdPrefix, snap, f.shardID, drop, cmd.OutOrStdout())
}

// writeOutputs prints pending outputs as a table.
func writeOutputs(w io.Writer, pending []shard.PendingOutput) error {
	if len(pending) == 0 {
		_, err := fmt.Fprintln(w, "no pending outputs")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OUTPUT\tTOPIC\tPARTITION\tBYTES\tKEY")
	for _, p := range pending {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%q\n", p.Ref(), p.Topic, p.Partition, p.Bytes, p.Key)
	}
	return tw.Flush()
}

// primaryRunning reports whether shard id has a PRIMARY replica in slot 0.
func primaryRunning(snap allocator.Snapshot, id string) bool {
	for _, a := range snap.Assignments {
		if a.Item == id && a.Slot == 0 && a.Status.State == allocator.StatePrimary {
			return true
		}
	}
	return false
}
