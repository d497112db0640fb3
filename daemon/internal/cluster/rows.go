package cluster

import (
	"sort"
	"time"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/shard"
)

// ShardRows builds the rows of `shards list` from a snapshot (pure).
func ShardRows(snap allocator.Snapshot) []api.ShardRow {
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
	rows := make([]api.ShardRow, 0, len(ids))
	for _, id := range ids {
		row := api.ShardRow{ID: id, Status: api.StatusUnassigned, Replicas: []api.ReplicaRow{}, Lag: map[string]int64{}}
		if s, ok := snap.Items[id].Item.(*shard.Spec); ok && s != nil && s.Disable {
			row.Status = api.StatusDisabled
		}
		if e, ok := snap.InvalidItems[id]; ok {
			row.Status, row.Error = api.StatusInvalid, e
		}
		if rec, ok := snap.Restarts[id]; ok {
			row.Restarts = restartRow(rec, byItem[id])
		}
		as := byItem[id]
		sort.Slice(as, func(i, j int) bool { return as[i].Slot < as[j].Slot })
		for _, a := range as {
			row.Replicas = append(row.Replicas, api.ReplicaRow{Member: a.Member, Zone: a.Zone, Slot: a.Slot, State: string(a.Status.State), Error: a.Status.Error})
			if a.Slot == 0 {
				row.Primary, row.PrimaryZone = a.Member, a.Zone
				if row.Status != api.StatusDisabled && row.Status != api.StatusInvalid {
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
func restartRow(rec allocator.RestartRecord, as []allocator.Assignment) *api.RestartRow {
	r := &api.RestartRow{Attempts: rec.Attempts, MaxAttempts: rec.MaxAttempts, Exhausted: rec.Exhausted, LastError: rec.Error}
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

// MemberRows builds the rows of `members list` from a snapshot (pure).
func MemberRows(snap allocator.Snapshot) []api.MemberRow {
	rows := make([]api.MemberRow, 0, len(snap.Members))
	for _, m := range snap.Members {
		rows = append(rows, api.MemberRow{
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

// OthersToTakeOver reports whether a member other than zone/id, and not
// exiting, is in the cluster (a lone member's drain could never finish).
func OthersToTakeOver(snap allocator.Snapshot, zone, id string) bool {
	for _, m := range snap.Members {
		if (m.Zone != zone || m.ID != id) && !m.Spec.Exiting {
			return true
		}
	}
	return false
}

// RestartNote is what comes after a RESTARTS line's count.
func RestartNote(rs *api.RestartRow) string {
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
