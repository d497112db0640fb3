package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/wal"
)

// writeShardTable prints rows as an aligned table.
func writeShardTable(w io.Writer, rows []api.ShardRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tPRIMARY\tREPLICAS\tLAG")
	for _, r := range rows {
		var reps []string
		for _, rep := range r.Replicas {
			reps = append(reps, fmt.Sprintf("%s/%s:%d=%s", rep.Zone, rep.Member, rep.Slot, rep.State))
		}
		chans := make([]string, 0, len(r.Lag))
		for ch := range r.Lag {
			chans = append(chans, ch)
		}
		sort.Strings(chans)
		var lags []string
		for _, ch := range chans {
			lags = append(lags, fmt.Sprintf("%s=%d", ch, r.Lag[ch]))
		}
		primary := "-"
		if r.Primary != "" {
			primary = r.PrimaryZone + "/" + r.Primary
		}
		status := r.Status
		if r.Error != "" && r.Status == api.StatusInvalid {
			status += ": " + r.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, status, primary, cmdline.OrDash(strings.Join(reps, ",")), cmdline.OrDash(strings.Join(lags, ",")))
	}
	return tw.Flush()
}

// maxErrorShown bounds each replica error writeReplicaErrors prints.
const maxErrorShown = 300

// writeReplicaErrors prints, after the table, why each FAILED replica
// failed (the table has no room for it, and a bare FAILED says nothing),
// cut to maxErrorShown bytes; -o json has the whole text.
func writeReplicaErrors(w io.Writer, rows []api.ShardRow) {
	for _, r := range rows {
		for _, rep := range r.Replicas {
			if rep.State != string(allocator.StateFailed) || rep.Error == "" {
				continue
			}
			e := rep.Error
			if len(e) > maxErrorShown {
				n := maxErrorShown
				for n > 0 && !utf8.RuneStart(e[n]) {
					n-- // cut between runes
				}
				e = e[:n] + "… (-o json has it all)"
			}
			fmt.Fprintf(w, "FAILED %s on %s/%s slot %d: %s\n", r.ID, rep.Zone, rep.Member, rep.Slot, e)
		}
		if rs := r.Restarts; rs != nil {
			fmt.Fprintf(w, "RESTARTS %s: %d of %d automatic restarts%s\n", r.ID, rs.Attempts, rs.MaxAttempts, cluster.RestartNote(rs))
		}
	}
}

func writeMemberTable(w io.Writer, rows []api.MemberRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tZONE\tENDPOINT\tITEM_LIMIT\tEXITING\tLEADER")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%t\t%t\n", r.ID, r.Zone, r.Endpoint, r.ItemLimit, r.Exiting, r.Leader)
	}
	return tw.Flush()
}

func newShardsListCommand(prog cmdline.Program) *cobra.Command {
	return listCommand(listSpec{
		short: "List shards: status, primary, replicas, per-source lag",
		long: `list prints every shard: its status, its primary (zone/member), its replicas
(zone/member:slot=STATE; slot 0 is the primary, the others hot standbys) and,
per source channel, how far the primary is behind the channel's last message.
STATUS is the primary's state, or what the shard lacks:
  IDLE        assigned, not started yet
  BACKFILL    replaying the recovery log into the local database (or
              restarting after a transient failure: the error says when)
  STANDBY     caught up, tailing the log (a standby's state)
  PRIMARY     consuming its sources and writing the log
  FAILED      stopped on an error a person must judge; the error says what.
              'consumerd shards unassign --failed' restarts failed replicas
  UNASSIGNED  no primary (no member free to take it)
  DISABLED    its spec says disable
  INVALID     its spec in etcd does not decode; the error says why. Write
              a valid spec with 'consumerd shards apply'`,
		rows: shardListing,
	})
}

// shardListing is `shards list`: the rows with each primary's lag, and on
// stderr the partitions no shard reads (the output keeps its shape) and,
// after a table, why each FAILED replica failed.
func shardListing(ctx context.Context, l listing) (any, func(io.Writer) error, error) {
	rows := cluster.ShardRows(l.snap)
	if len(rows) > 0 {
		var opener wal.Opener
		op, err := l.cf.OpenWAL(hclog.NewNullLogger(), 0)
		if err != nil {
			fmt.Fprintf(l.stderr, "note: %v; showing the lag the primaries report\n", err)
		} else {
			opener = op
			defer op.Close()
		}
		hc, err := l.cf.HTTPClient(l.cf.DialTimeout)
		if err != nil {
			return nil, nil, err
		}
		lctx, cancel := context.WithTimeout(ctx, l.cf.DialTimeout)
		cluster.FillLag(lctx, l.snap, rows, opener, hc, l.stderr)
		cancel()
		hc.CloseIdleConnections() // its own transport: no keep-alive outlives the command
	}
	if ts, err := topicsAt(l.cli, l.cf.EtcdPrefix).List(ctx); err != nil {
		fmt.Fprintf(l.stderr, "WARNING: %v\n", err)
	} else {
		cluster.WarnUnread(l.stderr, ts, shard.Specs(l.snap))
	}
	table := func(w io.Writer) error {
		if err := writeShardTable(w, rows); err != nil {
			return err
		}
		writeReplicaErrors(l.stderr, rows)
		return nil
	}
	return rows, table, nil
}

func newMembersCommand(prog cmdline.Program) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "members",
		Short: "Inspect members",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(listCommand(listSpec{
		short: "List members: id, zone, endpoint, item limit, exiting, leader",
		rows: func(_ context.Context, l listing) (any, func(io.Writer) error, error) {
			rows := cluster.MemberRows(l.snap)
			return rows, func(w io.Writer) error { return writeMemberTable(w, rows) }, nil
		},
	}))
	return cmd
}

// listSpec is a `list [-o table|json]` command: its help and its rows.
type listSpec struct {
	short, long string
	// rows returns what to print: v as JSON with -o json, else table.
	rows func(ctx context.Context, l listing) (v any, table func(io.Writer) error, err error)
}

// listing is what a listing's rows are built from: the connection flags,
// the etcd client, the keyspace read once, and stderr for warnings.
type listing struct {
	cf     *connect.ClientFlags
	cli    *clientv3.Client
	snap   allocator.Snapshot
	stderr io.Writer
}

// listCommand builds the command of spec: it checks -o, connects, reads
// the keyspace once and prints what spec.rows returns.
func listCommand(spec listSpec) *cobra.Command {
	var cf connect.ClientFlags
	var output string
	cmd := &cobra.Command{
		Use:   "list [-o table|json]",
		Short: spec.short,
		Long:  spec.long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cmdline.CheckOutput(output); err != nil {
				return err
			}
			ctx := cmd.Context()
			cli, snap, err := connectAndLoad(ctx, &cf)
			if err != nil {
				return err
			}
			defer cli.Close()
			v, table, err := spec.rows(ctx, listing{cf: &cf, cli: cli, snap: snap, stderr: cmd.ErrOrStderr()})
			if err != nil {
				return err
			}
			if output == "json" {
				return cmdline.WriteJSON(cmd.OutOrStdout(), v)
			}
			return table(cmd.OutOrStdout())
		},
	}
	cf.Bind(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}
