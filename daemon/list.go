package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// ShardRow is one shard of `shards list -o json` (DESIGN §7). The row types
// (ShardRow, ReplicaRow, MemberRow) and the Status* values stay exported as
// the CLI's JSON contract, for Go programs that decode its output.
type ShardRow struct {
	ID string `json:"id"`
	// Status is the primary's state (PRIMARY, BACKFILL, FAILED, ...),
	// UNASSIGNED when the shard has no primary, DISABLED when disabled,
	// INVALID when its spec in etcd does not decode (Error says why).
	Status string `json:"status"`
	// Error is, for an INVALID shard, why its spec does not decode.
	Error string `json:"error,omitempty"`
	// Primary is the member id of slot 0, or ""; PrimaryZone its zone
	// (member ids are unique only within a zone).
	Primary     string       `json:"primary"`
	PrimaryZone string       `json:"primary_zone,omitempty"`
	Replicas    []ReplicaRow `json:"replicas"`
	// Lag is, per source channel, the channel's last message id minus the
	// offset the primary has consumed to. A channel is missing when it could
	// not be measured (no primary, primary or WAL unreachable).
	Lag map[string]int64 `json:"lag"`
	// Restarts is the leader's automatic restarts of the shard's FAILED
	// replicas (a spec with a restart policy), absent when there were none.
	Restarts *RestartRow `json:"restarts,omitempty"`
}

// RestartRow is a shard's restart record (allocator.RestartRecord).
type RestartRow struct {
	Attempts    int `json:"attempts"`
	MaxAttempts int `json:"max_attempts"`
	// NextAt is when the leader restarts the FAILED replica (RFC 3339),
	// empty when none is pending.
	NextAt string `json:"next_at,omitempty"`
	// Exhausted: the attempts are used up; the replica stays FAILED until
	// 'consumerd shards unassign --failed'.
	Exhausted   bool   `json:"exhausted,omitempty"`
	LastError   string `json:"last_error,omitempty"`
	LastRestart string `json:"last_restart,omitempty"`
}

// ReplicaRow is one replica of a ShardRow.
type ReplicaRow struct {
	Member string `json:"member"`
	Zone   string `json:"zone"`
	Slot   int    `json:"slot"`
	State  string `json:"state"`
	Error  string `json:"error,omitempty"`
}

// MemberRow is one member of `members list -o json` (DESIGN §7).
type MemberRow struct {
	ID        string `json:"id"`
	Zone      string `json:"zone"`
	Endpoint  string `json:"endpoint"`
	ItemLimit int    `json:"item_limit"`
	Exiting   bool   `json:"exiting"`
	Leader    bool   `json:"leader"`
}

// StatusUnassigned and StatusDisabled are ShardRow.Status values besides the
// replica states.
const (
	StatusUnassigned = "UNASSIGNED"
	StatusDisabled   = "DISABLED"
	StatusInvalid    = "INVALID"
)

// shardRows builds the rows of `shards list` from a snapshot (pure).
func shardRows(snap allocator.Snapshot) []ShardRow {
	byItem := map[string][]allocator.Assignment{}
	for _, a := range snap.Assignments {
		byItem[a.Item] = append(byItem[a.Item], a)
	}
	ids := make([]string, 0, len(snap.Items)+len(snap.InvalidItems))
	for id := range snap.Items {
		ids = append(ids, id)
	}
	for id := range snap.InvalidItems {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	rows := make([]ShardRow, 0, len(ids))
	for _, id := range ids {
		row := ShardRow{ID: id, Status: StatusUnassigned, Replicas: []ReplicaRow{}, Lag: map[string]int64{}}
		if s, ok := snap.Items[id].Item.(*shard.Spec); ok && s != nil && s.Disable {
			row.Status = StatusDisabled
		}
		if e, ok := snap.InvalidItems[id]; ok {
			row.Status, row.Error = StatusInvalid, e
		}
		if rec, ok := snap.Restarts[id]; ok {
			row.Restarts = restartRow(rec, byItem[id])
		}
		as := byItem[id]
		sort.Slice(as, func(i, j int) bool { return as[i].Slot < as[j].Slot })
		for _, a := range as {
			row.Replicas = append(row.Replicas, ReplicaRow{Member: a.Member, Zone: a.Zone, Slot: a.Slot, State: string(a.Status.State), Error: a.Status.Error})
			if a.Slot == 0 {
				row.Primary, row.PrimaryZone = a.Member, a.Zone
				if row.Status != StatusDisabled && row.Status != StatusInvalid {
					row.Status = string(a.Status.State)
				}
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// restartRow shows rec; a pending restart only while its failure is still
// there (as, the shard's assignments).
func restartRow(rec allocator.RestartRecord, as []allocator.Assignment) *RestartRow {
	r := &RestartRow{Attempts: rec.Attempts, MaxAttempts: rec.MaxAttempts, Exhausted: rec.Exhausted, LastError: rec.Error}
	if !rec.LastRestart.IsZero() {
		r.LastRestart = rec.LastRestart.UTC().Format(time.RFC3339)
	}
	for _, a := range as {
		if a.ModRevision == rec.Failure && a.Status.State == allocator.StateFailed && !rec.Exhausted && !rec.NotBefore.IsZero() {
			r.NextAt = rec.NotBefore.UTC().Format(time.RFC3339Nano)
		}
	}
	return r
}

// memberRows builds the rows of `members list` from a snapshot (pure).
func memberRows(snap allocator.Snapshot) []MemberRow {
	rows := make([]MemberRow, 0, len(snap.Members))
	for _, m := range snap.Members {
		rows = append(rows, MemberRow{
			ID: m.ID, Zone: m.Zone, Endpoint: m.Spec.Endpoint, ItemLimit: m.Spec.ItemLimit,
			Exiting: m.Spec.Exiting, Leader: snap.Leader == m.Zone+"/"+m.ID,
		})
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Zone != rows[j].Zone {
			return rows[i].Zone < rows[j].Zone
		}
		return rows[i].ID < rows[j].ID
	})
	return rows
}

// fillLag sets rows' lag: WAL LastID minus the offset the primary reports in
// its /v1/status. Channels that cannot be measured are left out, and a note
// goes to warn.
func fillLag(ctx context.Context, snap allocator.Snapshot, rows []ShardRow, opener wal.Opener, hc *http.Client, warn io.Writer) {
	statuses := map[string]*StatusResponse{} // by endpoint
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, row := range rows {
		p, ep, ok := shard.PrimaryOf(snap, row.ID)
		if !ok || ep == "" {
			continue
		}
		mu.Lock()
		_, seen := statuses[ep]
		statuses[ep] = nil
		mu.Unlock()
		if seen {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := fetchStatus(ctx, hc, ep)
			if err != nil {
				fmt.Fprintf(warn, "note: lag unknown for shards of %s/%s: %v\n", p.Zone, p.Member, err)
				return
			}
			mu.Lock()
			statuses[ep] = st
			mu.Unlock()
		}()
	}
	wg.Wait()

	lastIDs := map[string]message.MessageID{}
	walOK := opener != nil
	for i, row := range rows {
		_, ep, ok := shard.PrimaryOf(snap, row.ID)
		if !ok {
			continue
		}
		st := statuses[ep]
		if st == nil {
			continue
		}
		for _, r := range st.Replicas {
			if r.Shard != row.ID || r.Slot != 0 {
				continue
			}
			// The primary's own measurement (refreshed about every second)...
			for ch, reported := range r.Lag {
				rows[i].Lag[ch] = reported
			}
			// ... replaced, where possible, by the WAL's last id now minus the
			// offset the primary committed.
			for ch, off := range r.Offsets {
				if !walOK {
					break
				}
				last, seen := lastIDs[ch]
				if !seen {
					var err error
					if last, err = lastID(ctx, opener, ch); err != nil {
						fmt.Fprintf(warn, "note: WAL: %v; showing the lag the primaries report\n", err)
						walOK = false
						break
					}
					lastIDs[ch] = last
				}
				rows[i].Lag[ch] = max(0, int64(last)-int64(off))
			}
		}
	}
}

func lastID(ctx context.Context, opener wal.Opener, channel string) (message.MessageID, error) {
	w, err := opener.Open(ctx, &wal.OpenOption{Channel: channel})
	if err != nil {
		return 0, fmt.Errorf("opening %s: %w", channel, err)
	}
	defer w.Close()
	id, err := w.LastID(ctx)
	if err != nil {
		return 0, fmt.Errorf("last id of %s: %w", channel, err)
	}
	return id, nil
}

func fetchStatus(ctx context.Context, hc *http.Client, endpoint string) (*StatusResponse, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/v1/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s/v1/status: %s: %s", endpoint, resp.Status, strings.TrimSpace(string(b)))
	}
	var st StatusResponse
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("GET %s/v1/status: decoding: %w", endpoint, err)
	}
	return &st, nil
}

func validateOutput(o string) error {
	if o != "table" && o != "json" {
		return usagef("-o: %q must be 'table' or 'json'", o)
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeShardTable prints rows as an aligned table.
func writeShardTable(w io.Writer, rows []ShardRow) error {
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
		if r.Error != "" && r.Status == StatusInvalid {
			status += ": " + r.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, status, primary, orDash(strings.Join(reps, ",")), orDash(strings.Join(lags, ",")))
	}
	return tw.Flush()
}

// maxErrorShown bounds each replica error writeReplicaErrors prints.
const maxErrorShown = 300

// writeReplicaErrors prints, after the table, why each FAILED replica
// failed (the table has no room for it, and a bare FAILED says nothing),
// cut to maxErrorShown bytes; -o json has the whole text.
func writeReplicaErrors(w io.Writer, rows []ShardRow) {
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
			fmt.Fprintf(w, "RESTARTS %s: %d of %d automatic restarts%s\n", r.ID, rs.Attempts, rs.MaxAttempts, restartNote(rs))
		}
	}
}

// restartNote is what comes after a RESTARTS line's count.
func restartNote(rs *RestartRow) string {
	switch {
	case rs.Exhausted:
		return "; given up: 'consumerd shards unassign --failed' restarts it and the count"
	case rs.NextAt != "":
		return "; next at " + rs.NextAt
	case rs.LastRestart != "":
		return "; last at " + rs.LastRestart
	}
	return ""
}

func writeMemberTable(w io.Writer, rows []MemberRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tZONE\tENDPOINT\tITEM_LIMIT\tEXITING\tLEADER")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%t\t%t\n", r.ID, r.Zone, r.Endpoint, r.ItemLimit, r.Exiting, r.Leader)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newShardsListCommand(opts Options) *cobra.Command {
	var cf clientFlags
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
			if err := validateOutput(output); err != nil {
				return err
			}
			ctx := cmd.Context()
			cli, snap, err := cf.snapshot(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			rows := shardRows(snap)
			var opener wal.Opener
			if len(rows) > 0 {
				op, err := cf.openWAL(hclog.NewNullLogger())
				if err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "note: %v; showing the lag the primaries report\n", err)
				} else {
					opener = op
					defer op.Close()
				}
				hc, err := cf.httpClient(cf.dialTimeout)
				if err != nil {
					return err
				}
				lctx, cancel := context.WithTimeout(ctx, cf.dialTimeout)
				fillLag(lctx, snap, rows, opener, hc, cmd.ErrOrStderr())
				cancel()
				hc.CloseIdleConnections() // its own transport: no keep-alive outlives the command
			}
			// Partitions no shard reads (a deleted shard, a hand-written
			// spec): said on stderr, so the output keeps its shape.
			if ts, err := loadTopics(ctx, cli, cf.etcdPrefix); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "WARNING: %v\n", err)
			} else {
				warnUnread(cmd.ErrOrStderr(), ts, shard.Specs(snap))
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), rows)
			}
			if err := writeShardTable(cmd.OutOrStdout(), rows); err != nil {
				return err
			}
			writeReplicaErrors(cmd.ErrOrStderr(), rows)
			return nil
		},
	}
	cf.bind(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

func newMembersCommand(opts Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "members",
		Short: "Inspect members",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var cf clientFlags
	var output string
	list := &cobra.Command{
		Use:   "list [-o table|json]",
		Short: "List members: id, zone, endpoint, item limit, exiting, leader",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validateOutput(output); err != nil {
				return err
			}
			ctx := cmd.Context()
			cli, snap, err := cf.snapshot(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			rows := memberRows(snap)
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), rows)
			}
			return writeMemberTable(cmd.OutOrStdout(), rows)
		},
	}
	cf.bind(list.Flags())
	list.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	cmd.AddCommand(list)
	return cmd
}
