package statuspage

// This file builds what the status pages show (status_page.go renders it)
// from the member's view of etcd (an allocator.Snapshot) and the members'
// /v1/status answers. It is pure: no I/O, the time passed in.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	"github.com/consumerd/consumerd/shard"
)

// memberStatus is one member's /v1/status as the page got it: St, or Err
// saying why not.
type memberStatus struct {
	St  *api.StatusResponse
	Err error
}

// replica is the member's report of shard id at slot, if it has one.
func (ms memberStatus) replica(id string, slot int) (api.StatusReplica, bool) {
	if ms.St == nil {
		return api.StatusReplica{}, false
	}
	for _, r := range ms.St.Replicas {
		if r.Shard == id && r.Slot == slot {
			return r, true
		}
	}
	return api.StatusReplica{}, false
}

// pageHeader is the top of every status page: this member and its backends.
type pageHeader struct {
	Title     string
	Member    string // zone/id
	Endpoint  string
	Version   string
	Build     string
	Uptime    string
	Session   bool
	Ready     bool
	Leader    string // zone/id, "" when no member
	LeaderURL string
	Etcd      api.EtcdHealth
	EtcdErrAt string
	NATS      api.NATSHealth
	Generated string // UTC
	Revision  int64  // of the etcd view
}

// clusterPage is the page at /.
type clusterPage struct {
	pageHeader
	Summary []stateCount
	Members []memberView
	Shards  []shardView
	// Notes say what the page could not show (a member's status unreachable).
	Notes []string
}

type stateCount struct {
	State string
	N     int
}

type memberView struct {
	Key, ID, Zone, Endpoint string
	ItemLimit               int
	Primaries, Standbys     int
	Exiting, Leader, Self   bool
	Version                 string // from its member spec
	Uptime                  string // from its /v1/status ("" unknown)
	Ready                   string // "ready", "not ready", "" unknown
	StatusErr               string // why its /v1/status is unknown
}

type shardView struct {
	ID     string
	Status string
	// Error is an INVALID shard's error.
	Error      string
	Primary    string // zone/member, "" when none
	PrimaryURL string
	Standbys   []replicaView
	Lag        []lagView
	LagKnown   bool
	LastCommit string // RFC 3339, "" unknown
	CommitAge  string // e.g. "3s ago"
	Failed     []failedView
	Restarts   string
	// LogBytes is the log bytes since the last snapshot ("" unknown).
	LogBytes string
}

type replicaView struct {
	Member   string // zone/member
	URL      string // the member's endpoint
	Slot     int
	State    string // in etcd
	Error    string // in etcd
	Live     string // the state the member reports ("" unknown)
	LiveErr  string
	Applied  string // recovery-log id applied ("" unknown)
	ReplayTo string
	// ReplayLag is how many log ids the replica is behind the primary (or,
	// during BACKFILL, its replay target); "" unknown.
	ReplayLag string
}

type lagView struct {
	Channel string
	N       int64
}

type failedView struct {
	Replica string // zone/member slot N
	Error   string
	// Accept is the command that accepts the loss when a source lost
	// messages the replica had not read ("" otherwise): unassigning alone
	// fails the same way again.
	Accept string
}

// shardPage is the page at /shards/<id>.
type shardPage struct {
	pageHeader
	ID, Status, Error string
	Primary           string
	Spec              *specView // nil for an INVALID shard
	RawSpec           string    // the spec as stored, indented
	Replicas          []replicaView
	Failed            []failedView
	Restarts          string
	// Sources are the primary's lag and committed offset per source.
	Sources         []progressView
	LagKnown        bool
	Position        string // the primary's applied recovery-log id ("" unknown)
	LastCommit      string
	CommitAge       string
	LogBytes        string
	Snapshot        *snapshotView // from etcd; nil when none
	SnapshotErr     string
	PrimarySnapshot *snapshotView // as the primary reports it
	Notes           []string
}

type specView struct {
	App                   string
	Sources               []sourceView
	HotStandbys           int
	MinTxn, MaxTxn        string
	Disable               bool
	Labels                []labelView
	SnapshotIntervalBytes string
	SnapshotsKept         int
	LogResetTerm          int64
}

type sourceView struct {
	Topic     string
	Partition int
	Channel   string
}

type labelView struct{ Key, Value string }

type progressView struct {
	Channel     string
	Lag, Offset string // "" unknown
}

type snapshotView struct {
	ID, Manifest string
	Created      string
	Age          string
	Bytes        string
	LogID        uint64
	Term         uint64
}

// header builds the page header from this member's own status.
func header(title string, self api.StatusResponse, snap allocator.Snapshot, now time.Time) pageHeader {
	h := pageHeader{
		Title: title, Member: self.Zone + "/" + self.Member, Endpoint: self.Endpoint,
		Version: self.Version, Build: self.Build, Uptime: formatDuration(time.Duration(self.UptimeSeconds * float64(time.Second))),
		Session: self.Session, Ready: self.Ready, Leader: snap.Leader, Etcd: self.Etcd, NATS: self.NATS,
		Generated: now.UTC().Format(time.RFC3339), Revision: snap.Revision,
	}
	if !self.Etcd.LastErrorAt.IsZero() {
		h.EtcdErrAt = self.Etcd.LastErrorAt.UTC().Format(time.RFC3339) + " (" + formatAge(now, self.Etcd.LastErrorAt) + ")"
	}
	for _, m := range snap.Members {
		if m.Key() == snap.Leader {
			h.LeaderURL = m.Spec.Endpoint
		}
	}
	return h
}

// buildClusterPage builds the page at / from snap and the members'
// statuses (by zone/id; self's included).
func buildClusterPage(self api.StatusResponse, snap allocator.Snapshot, statuses map[string]memberStatus, now time.Time) clusterPage {
	p := clusterPage{pageHeader: header("consumerd "+self.Zone+"/"+self.Member, self, snap, now)}
	endpoints := map[string]string{}
	for _, m := range snap.Members {
		endpoints[m.Key()] = m.Spec.Endpoint
	}
	prim, stby := map[string]int{}, map[string]int{}
	for _, a := range snap.Assignments {
		if a.Slot == 0 {
			prim[a.Zone+"/"+a.Member]++
		} else {
			stby[a.Zone+"/"+a.Member]++
		}
	}
	for _, m := range snap.Members {
		key := m.Key()
		mv := memberView{
			Key: key, ID: m.ID, Zone: m.Zone, Endpoint: m.Spec.Endpoint, ItemLimit: m.Spec.ItemLimit,
			Primaries: prim[key], Standbys: stby[key], Exiting: m.Spec.Exiting, Leader: key == snap.Leader,
			Self: m.Zone == self.Zone && m.ID == self.Member, Version: m.Spec.Version,
		}
		switch ms := statuses[key]; {
		case ms.St != nil:
			mv.Uptime = formatDuration(time.Duration(ms.St.UptimeSeconds * float64(time.Second)))
			mv.Ready = "not ready"
			if ms.St.Ready {
				mv.Ready = "ready"
			}
		case ms.Err != nil:
			mv.StatusErr = ms.Err.Error()
			p.Notes = append(p.Notes, fmt.Sprintf("member %s: status unknown (%v): its replicas show what etcd holds", key, ms.Err))
		}
		p.Members = append(p.Members, mv)
	}
	counts := map[string]int{}
	for _, row := range cluster.ShardRows(snap) {
		counts[row.Status]++
		p.Shards = append(p.Shards, buildShardView(row, endpoints, statuses, now))
	}
	for st, n := range counts {
		p.Summary = append(p.Summary, stateCount{st, n})
	}
	sort.Slice(p.Summary, func(i, j int) bool { return p.Summary[i].State < p.Summary[j].State })
	return p
}

// buildShardView is one shard's row at /.
func buildShardView(row api.ShardRow, endpoints map[string]string, statuses map[string]memberStatus, now time.Time) shardView {
	v := shardView{ID: row.ID, Status: row.Status, Error: row.Error, Restarts: restartsText(row.Restarts)}
	reps := replicaViews(row, endpoints, statuses)
	v.Failed = failedViews(row, statuses)
	for _, r := range reps {
		if r.Slot != 0 {
			v.Standbys = append(v.Standbys, r)
		}
	}
	if row.Primary == "" {
		return v
	}
	v.Primary = row.PrimaryZone + "/" + row.Primary
	v.PrimaryURL = endpoints[v.Primary]
	if pr, ok := statuses[v.Primary].replica(row.ID, 0); ok {
		v.Lag, v.LagKnown = lagViews(pr.Lag), true
		v.LastCommit, v.CommitAge = commitTimes(pr, now)
		v.LogBytes = logBytesText(pr)
	}
	return v
}

// buildShardPage builds /shards/<id>. ptr is the shard's snapshot pointer
// in etcd (ok false: none; ptrErr: it could not be read).
func buildShardPage(self api.StatusResponse, snap allocator.Snapshot, id string, statuses map[string]memberStatus, ptr snapshot.Pointer, ptrOK bool, ptrErr error, now time.Time) shardPage {
	p := shardPage{pageHeader: header("shard "+id, self, snap, now), ID: id}
	endpoints := map[string]string{}
	for _, m := range snap.Members {
		endpoints[m.Key()] = m.Spec.Endpoint
	}
	var row api.ShardRow
	for _, r := range cluster.ShardRows(snap) {
		if r.ID == id {
			row = r
		}
	}
	p.Status, p.Error, p.Restarts = row.Status, row.Error, restartsText(row.Restarts)
	if it, ok := snap.Items[id]; ok {
		if s, ok := it.Item.(*shard.Spec); ok && s != nil {
			p.Spec = buildSpecView(s)
		}
		var b bytes.Buffer
		if json.Indent(&b, it.Raw, "", "  ") == nil {
			p.RawSpec = b.String()
		} else {
			p.RawSpec = string(it.Raw)
		}
	}
	p.Replicas = replicaViews(row, endpoints, statuses)
	p.Failed = failedViews(row, statuses)
	for key, ms := range statuses {
		if ms.Err != nil {
			p.Notes = append(p.Notes, fmt.Sprintf("member %s: status unknown (%v): its replica shows what etcd holds", key, ms.Err))
		}
	}
	sort.Strings(p.Notes)
	switch {
	case ptrErr != nil:
		p.SnapshotErr = ptrErr.Error()
	case ptrOK:
		p.Snapshot = &snapshotView{ID: ptr.ID, Manifest: ptr.Manifest, Created: ptr.Created.UTC().Format(time.RFC3339), Age: formatAge(now, ptr.Created),
			Bytes: formatBytes(ptr.Size), LogID: ptr.LogID, Term: ptr.Term}
	}
	if row.Primary == "" {
		return p
	}
	p.Primary = row.PrimaryZone + "/" + row.Primary
	pr, ok := statuses[p.Primary].replica(id, 0)
	if !ok {
		return p
	}
	p.Sources, p.LagKnown = progressViews(pr), true
	p.Position = fmt.Sprint(pr.Applied)
	p.LastCommit, p.CommitAge = commitTimes(pr, now)
	p.LogBytes = logBytesText(pr)
	if ls := pr.LastSnapshot; ls != nil && (p.Snapshot == nil || p.Snapshot.ID != ls.ID) {
		p.PrimarySnapshot = &snapshotView{ID: ls.ID, Manifest: ls.Manifest, Created: ls.Time.UTC().Format(time.RFC3339), Age: formatAge(now, ls.Time),
			Bytes: formatBytes(ls.Bytes), LogID: ls.LogID}
	}
	return p
}

func buildSpecView(s *shard.Spec) *specView {
	v := &specView{
		App: s.App, HotStandbys: s.HotStandbys, MinTxn: s.EffectiveMinTxnDuration().String(), MaxTxn: s.EffectiveMaxTxnDuration().String(),
		Disable: s.Disable, SnapshotIntervalBytes: formatBytes(s.EffectiveSnapshotIntervalBytes()), SnapshotsKept: s.EffectiveSnapshotsKept(),
		LogResetTerm: s.LogResetTerm,
	}
	for _, src := range s.Sources {
		v.Sources = append(v.Sources, sourceView{src.Topic, src.Partition, src.Channel()})
	}
	for k, val := range s.Labels {
		v.Labels = append(v.Labels, labelView{k, val})
	}
	sort.Slice(v.Labels, func(i, j int) bool { return v.Labels[i].Key < v.Labels[j].Key })
	return v
}

// replicaViews are row's replicas by slot, with what their members report.
func replicaViews(row api.ShardRow, endpoints map[string]string, statuses map[string]memberStatus) []replicaView {
	var primaryApplied uint64
	primaryKnown := false
	if row.Primary != "" {
		if pr, ok := statuses[row.PrimaryZone+"/"+row.Primary].replica(row.ID, 0); ok {
			primaryApplied, primaryKnown = pr.Applied, true
		}
	}
	out := make([]replicaView, 0, len(row.Replicas))
	for _, rep := range row.Replicas {
		key := rep.Zone + "/" + rep.Member
		v := replicaView{Member: key, URL: endpoints[key], Slot: rep.Slot, State: rep.State, Error: rep.Error}
		if lr, ok := statuses[key].replica(row.ID, rep.Slot); ok {
			v.Live, v.LiveErr, v.Applied = lr.State, lr.Error, fmt.Sprint(lr.Applied)
			if lr.ReplayTo > 0 {
				v.ReplayTo = fmt.Sprint(lr.ReplayTo)
			}
			switch {
			case rep.Slot == 0:
				v.ReplayLag = "0"
			case lr.State == string(allocator.StateBackfill) && lr.ReplayTo > 0:
				v.ReplayLag = fmt.Sprint(lr.ReplayTo - min(lr.Applied, lr.ReplayTo))
			case primaryKnown:
				v.ReplayLag = fmt.Sprint(primaryApplied - min(lr.Applied, primaryApplied))
			}
		}
		out = append(out, v)
	}
	return out
}

// failedViews are row's FAILED replicas with their errors: etcd's, else
// what the member reports.
func failedViews(row api.ShardRow, statuses map[string]memberStatus) []failedView {
	var out []failedView
	for _, rep := range row.Replicas {
		if rep.State != string(allocator.StateFailed) {
			continue
		}
		key := rep.Zone + "/" + rep.Member
		e := rep.Error
		if lr, ok := statuses[key].replica(row.ID, rep.Slot); ok && e == "" {
			e = lr.Error
		}
		fv := failedView{Replica: fmt.Sprintf("%s slot %d", key, rep.Slot), Error: e}
		if src, ok := shard.LostSourceIn(e); ok {
			fv.Accept = fmt.Sprintf("consumerd shards accept-source --shard %s --topic %s --partition %d --from start|end --yes", row.ID, src.Topic, src.Partition)
		}
		out = append(out, fv)
	}
	return out
}

func lagViews(lag map[string]int64) []lagView {
	out := make([]lagView, 0, len(lag))
	for ch, n := range lag {
		out = append(out, lagView{ch, n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Channel < out[j].Channel })
	return out
}

// progressViews are pr's lag and offsets by source channel.
func progressViews(pr api.StatusReplica) []progressView {
	by := map[string]*progressView{}
	get := func(ch string) *progressView {
		if by[ch] == nil {
			by[ch] = &progressView{Channel: ch}
		}
		return by[ch]
	}
	for ch, n := range pr.Lag {
		get(ch).Lag = fmt.Sprint(n)
	}
	for ch, off := range pr.Offsets {
		get(ch).Offset = fmt.Sprint(off)
	}
	out := make([]progressView, 0, len(by))
	for _, v := range by {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Channel < out[j].Channel })
	return out
}

func commitTimes(pr api.StatusReplica, now time.Time) (at, age string) {
	if pr.LastCommit == nil {
		return "", ""
	}
	return pr.LastCommit.UTC().Format(time.RFC3339Nano), formatAge(now, *pr.LastCommit)
}

func logBytesText(pr api.StatusReplica) string {
	if pr.LogBytesSinceSnapshot == nil {
		return ""
	}
	return formatBytes(*pr.LogBytesSinceSnapshot)
}

// restartsText summarizes a shard's automatic restarts, "" when none.
func restartsText(rs *api.RestartRow) string {
	if rs == nil {
		return ""
	}
	return fmt.Sprintf("%d of %d automatic restarts%s", rs.Attempts, rs.MaxAttempts, cluster.RestartNote(rs))
}

// formatAge is how long before now t was, e.g. "3.2s ago".
func formatAge(now, t time.Time) string {
	d := now.Sub(t)
	if d < 0 {
		return "just now"
	}
	return formatDuration(d) + " ago"
}

// formatDuration rounds d for people: 850ms, 12.3s, 4m05s, 3h12m, 2d04h.
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// formatBytes is n in binary units: 512 B, 1.5 KiB, 64.0 MiB.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
