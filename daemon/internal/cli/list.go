package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

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
	var cf connect.ClientFlags
	var output string
	cmd := &cobra.Command{
		Use:   "list [-o table|json]",
		Short: "List shards: status, primary, replicas, per-source lag",
		Long: `list prints every shard: its status, its primary (zone/member), its replicas
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
		Args: cobra.NoArgs,
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
			rows := cluster.ShardRows(snap)
			var opener wal.Opener
			if len(rows) > 0 {
				op, err := cf.OpenWAL(hclog.NewNullLogger(), 0)
				if err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "note: %v; showing the lag the primaries report\n", err)
				} else {
					opener = op
					defer op.Close()
				}
				hc, err := cf.HTTPClient(cf.DialTimeout)
				if err != nil {
					return err
				}
				lctx, cancel := context.WithTimeout(ctx, cf.DialTimeout)
				cluster.FillLag(lctx, snap, rows, opener, hc, cmd.ErrOrStderr())
				cancel()
				hc.CloseIdleConnections() // its own transport: no keep-alive outlives the command
			}
			// Partitions no shard reads (a deleted shard, a hand-written
			// spec): said on stderr, so the output keeps its shape.
			if ts, err := topicsAt(cli, cf.EtcdPrefix).List(ctx); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "WARNING: %v\n", err)
			} else {
				cluster.WarnUnread(cmd.ErrOrStderr(), ts, shard.Specs(snap))
			}
			if output == "json" {
				return cmdline.WriteJSON(cmd.OutOrStdout(), rows)
			}
			if err := writeShardTable(cmd.OutOrStdout(), rows); err != nil {
				return err
			}
			writeReplicaErrors(cmd.ErrOrStderr(), rows)
			return nil
		},
	}
	cf.Bind(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

func newMembersCommand(prog cmdline.Program) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "members",
		Short: "Inspect members",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var cf connect.ClientFlags
	var output string
	list := &cobra.Command{
		Use:   "list [-o table|json]",
		Short: "List members: id, zone, endpoint, item limit, exiting, leader",
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
			rows := cluster.MemberRows(snap)
			if output == "json" {
				return cmdline.WriteJSON(cmd.OutOrStdout(), rows)
			}
			return writeMemberTable(cmd.OutOrStdout(), rows)
		},
	}
	cf.Bind(list.Flags())
	list.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	cmd.AddCommand(list)
	return cmd
}
