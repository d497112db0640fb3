package statuspage

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/daemon/internal/htmltest"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	"github.com/consumerd/consumerd/shard"
)

const evil = `<script>alert("x")</script>&<b>`

// statusFixture is a cluster view: two members (one whose status is
// unknown, one with a hostile endpoint), a PRIMARY shard with a standby
// behind it, a FAILED shard whose error holds markup, an INVALID one, an
// UNASSIGNED one.
func statusFixture(t *testing.T) (api.StatusResponse, allocator.Snapshot, map[string]memberStatus) {
	t.Helper()
	item := func(id string, standbys int) allocator.ItemInfo {
		s := &shard.Spec{ID: id, App: "wordcount", Sources: []shard.Source{{Topic: "words", Partition: 0}}, HotStandbys: standbys, Labels: map[string]string{"team": evil}}
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return allocator.ItemInfo{ID: id, Raw: raw, Item: s}
	}
	snap := allocator.Snapshot{
		Revision: 42,
		Members: []allocator.MemberInfo{
			{Zone: "a", ID: "m1", Spec: allocator.MemberSpec{Endpoint: "http://127.0.0.1:1", ItemLimit: 10, Version: "v1"}},
			{Zone: "b", ID: "m2", Spec: allocator.MemberSpec{Endpoint: "javascript:alert(1)", ItemLimit: 5, Exiting: true}},
		},
		Items: map[string]allocator.ItemInfo{"wc-0": item("wc-0", 1), "wc-1": item("wc-1", 0), "wc-2": item("wc-2", 0)},
		Assignments: []allocator.Assignment{
			{Item: "wc-0", Zone: "a", Member: "m1", Slot: 0, Status: allocator.ReplicaStatus{State: allocator.StatePrimary}},
			{Item: "wc-0", Zone: "b", Member: "m2", Slot: 1, Status: allocator.ReplicaStatus{State: allocator.StateStandby}},
			{Item: "wc-1", Zone: "a", Member: "m1", Slot: 0, Status: allocator.ReplicaStatus{State: allocator.StateFailed, Error: "consume: " + evil}},
		},
		InvalidItems: map[string]string{"bad-0": `app: "` + evil + `": character '<'`},
		Leader:       "a/m1",
	}
	commit := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	since := int64(3 << 20)
	self := api.StatusResponse{
		Member: "m1", Zone: "a", Endpoint: "http://127.0.0.1:1", Session: true, Leader: true, Version: "v1", Build: "v1 (commit unknown, go1.26.8)", UptimeSeconds: 75,
		Etcd: api.EtcdHealth{Session: true, Connection: "READY", LastError: "lease " + evil, LastErrorAt: commit},
		NATS: api.NATSHealth{URL: "nats://127.0.0.1:4222", Connected: true, ServerVersion: "2.12.1"},
		Replicas: []api.StatusReplica{
			{Shard: "wc-0", App: "wordcount", Slot: 0, State: "PRIMARY", Lag: map[string]int64{"words/0000": 7}, Offsets: map[string]uint64{"words/0000": 93},
				Applied: 120, LastCommit: &commit, LogBytesSinceSnapshot: &since,
				LastSnapshot: &api.StatusSnapshot{ID: "snap-1", Manifest: "wc-0/manifests/snap-1.json", Time: commit.Add(-time.Hour), Bytes: 2048, LogID: 100}},
			{Shard: "wc-1", App: "wordcount", Slot: 0, State: "FAILED", Error: "consume: " + evil},
		},
	}
	statuses := map[string]memberStatus{
		"a/m1": {St: &self},
		"b/m2": {Err: errors.New("dial tcp: connection refused")},
	}
	return self, snap, statuses
}

// render executes a page template as the handlers do.
func render(t *testing.T, name string, data any) []byte {
	t.Helper()
	s := &Pages{}
	rec := httptest.NewRecorder()
	s.renderPage(rec, 200, name, data)
	if rec.Code != 200 {
		t.Fatalf("rendering %s: %d %s", name, rec.Code, rec.Body)
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	return rec.Body.Bytes()
}

// TestClusterPageShowsEtcdAndStatuses renders / from a fixture and checks
// what it shows, in the markup tests and people read: every shard with the
// status `shards list` gives and its primary, the standby's replay lag,
// lag, last commit and log bytes from the primary's status, FAILED and
// INVALID errors as text (markup in them escaped: no element made of it), every
// member with its counts, the leader, a hostile endpoint not made a link,
// and a note for the member that did not answer.
func TestClusterPageShowsEtcdAndStatuses(t *testing.T) {
	self, snap, statuses := statusFixture(t)
	now := time.Date(2026, 12, 1, 10, 0, 3, 0, time.UTC)
	page := render(t, "status", buildClusterPage(self, snap, statuses, now))
	if !bytes.Contains(page, []byte(`<meta http-equiv="refresh" content="5">`)) {
		t.Error("no auto refresh")
	}
	doc := htmltest.Parse(t, page)
	if n := htmltest.FindAll(doc, func(n *html.Node) bool { return n.Data == "script" }); len(n) != 0 {
		t.Fatalf("%d script elements: markup in a value was not escaped", len(n))
	}
	if l := htmltest.FindAll(doc, func(n *html.Node) bool { return htmltest.AttrOf(n, "id") == "leader" }); len(l) != 1 || htmltest.AttrOf(l[0], "data-leader") != "a/m1" {
		t.Fatalf("leader element: %v", l)
	}
	shards := htmltest.ByAttr(htmltest.FindAll(doc, htmltest.HasAttr("data-shard")), "data-shard")
	want := map[string][2]string{"wc-0": {"PRIMARY", "a/m1"}, "wc-1": {"FAILED", "a/m1"}, "wc-2": {"UNASSIGNED", ""}, "bad-0": {"INVALID", ""}}
	if len(shards) != len(want) {
		t.Fatalf("%d shard rows, want %d", len(shards), len(want))
	}
	for id, w := range want {
		row := shards[id]
		if row == nil || htmltest.AttrOf(row, "data-status") != w[0] || htmltest.AttrOf(row, "data-primary") != w[1] {
			t.Errorf("shard %s: row %v, want status %s primary %q", id, row, w[0], w[1])
		}
	}
	wc0 := shards["wc-0"]
	if sb := htmltest.FindAll(wc0, htmltest.HasAttr("data-replay-lag")); len(sb) != 1 || htmltest.AttrOf(sb[0], "data-member") != "b/m2" || htmltest.AttrOf(sb[0], "data-replay-lag") != "" {
		t.Errorf("wc-0 standby on an unreachable member: %v (want its lag unknown)", sb)
	}
	if lag := htmltest.FindAll(wc0, htmltest.HasAttr("data-lag")); len(lag) != 1 || htmltest.AttrOf(lag[0], "data-channel") != "words/0000" || htmltest.AttrOf(lag[0], "data-lag") != "7" {
		t.Errorf("wc-0 lag: %v", lag)
	}
	if c := htmltest.FindAll(wc0, htmltest.HasAttr("data-last-commit")); len(c) != 1 || !strings.Contains(htmltest.Text(c[0]), "3s ago") {
		t.Errorf("wc-0 last commit: %q", htmltest.Text(c[0]))
	}
	if b := htmltest.FindAll(wc0, htmltest.HasAttr("data-log-bytes")); len(b) != 1 || htmltest.AttrOf(b[0], "data-log-bytes") != "3.0 MiB" {
		t.Errorf("wc-0 log bytes since snapshot: %v", b)
	}
	if f := htmltest.FindAll(shards["wc-1"], htmltest.HasAttr("data-replica")); len(f) != 1 || !strings.Contains(htmltest.Text(f[0]), "consume: "+evil) {
		t.Errorf("wc-1 FAILED error: %v", f)
	}
	if !strings.Contains(htmltest.Text(shards["bad-0"]), evil) {
		t.Errorf("bad-0 INVALID error not shown as text: %q", htmltest.Text(shards["bad-0"]))
	}
	members := htmltest.ByAttr(htmltest.FindAll(doc, func(n *html.Node) bool { return htmltest.AttrOf(n, "class") == "member" }), "data-member")
	if len(members) != 2 {
		t.Fatalf("%d member rows, want 2", len(members))
	}
	m1, m2 := members["a/m1"], members["b/m2"]
	if m1 == nil || htmltest.AttrOf(m1, "data-leader") != "true" || htmltest.AttrOf(m1, "data-primaries") != "2" || htmltest.AttrOf(m1, "data-standbys") != "0" {
		t.Errorf("member a/m1: %v", m1)
	}
	if m2 == nil || htmltest.AttrOf(m2, "data-exiting") != "true" || htmltest.AttrOf(m2, "data-primaries") != "0" || htmltest.AttrOf(m2, "data-standbys") != "1" || !strings.Contains(htmltest.Text(m2), "unreachable") {
		t.Errorf("member b/m2: %v %q", m2, htmltest.Text(m2))
	}
	for _, a := range htmltest.FindAll(doc, func(n *html.Node) bool { return n.Data == "a" }) {
		if strings.HasPrefix(htmltest.AttrOf(a, "href"), "javascript:") {
			t.Errorf("a javascript: link: %v", a.Attr)
		}
	}
	if notes := htmltest.FindAll(doc, func(n *html.Node) bool { return htmltest.AttrOf(n, "class") == "note" }); len(notes) != 1 || !strings.Contains(htmltest.Text(notes[0]), "b/m2") {
		t.Errorf("notes: %v", notes)
	}
	if e := htmltest.FindAll(doc, func(n *html.Node) bool { return htmltest.AttrOf(n, "id") == "etcd" }); len(e) != 1 || !strings.Contains(htmltest.Text(e[0]), "lease "+evil) || !strings.Contains(htmltest.Text(e[0]), "READY") {
		t.Errorf("etcd health: %v", e)
	}
}

// TestShardPageShowsDetail renders /shards/wc-0 and /shards/bad-0 from the
// fixture: spec fields, replicas with their states, progress, the
// snapshot etcd points at (and the primary's, when it differs), and an
// INVALID shard's error.
func TestShardPageShowsDetail(t *testing.T) {
	self, snap, statuses := statusFixture(t)
	now := time.Date(2026, 12, 1, 10, 0, 3, 0, time.UTC)
	ptr := snapshot.Pointer{ID: "snap-2", Manifest: "wc-0/manifests/snap-2.json", LogID: 110, Term: 9, Size: 4096, Created: now.Add(-time.Minute)}
	doc := htmltest.Parse(t, render(t, "shard", buildShardPage(self, snap, "wc-0", statuses, ptr, true, nil, now)))
	if n := htmltest.FindAll(doc, func(n *html.Node) bool { return n.Data == "script" }); len(n) != 0 {
		t.Fatalf("%d script elements", len(n))
	}
	h := htmltest.FindAll(doc, func(n *html.Node) bool { return htmltest.AttrOf(n, "id") == "shard" })
	if len(h) != 1 || htmltest.AttrOf(h[0], "data-shard") != "wc-0" || htmltest.AttrOf(h[0], "data-status") != "PRIMARY" || htmltest.AttrOf(h[0], "data-primary") != "a/m1" {
		t.Fatalf("heading: %v", h)
	}
	reps := htmltest.FindAll(doc, func(n *html.Node) bool { return htmltest.AttrOf(n, "class") == "replica" })
	if len(reps) != 2 || htmltest.AttrOf(reps[0], "data-slot") != "0" || htmltest.AttrOf(reps[0], "data-applied") != "120" || htmltest.AttrOf(reps[1], "data-member") != "b/m2" || htmltest.AttrOf(reps[1], "data-state") != "STANDBY" || htmltest.AttrOf(reps[1], "data-live") != "" {
		t.Errorf("replicas: %v", reps)
	}
	if p := htmltest.FindAll(doc, htmltest.HasAttr("data-position")); len(p) != 1 || htmltest.AttrOf(p[0], "data-position") != "120" {
		t.Errorf("position: %v", p)
	}
	if s := htmltest.FindAll(doc, func(n *html.Node) bool { return htmltest.AttrOf(n, "id") == "snapshot" }); len(s) != 1 || htmltest.AttrOf(s[0], "data-snapshot-id") != "snap-2" || !strings.Contains(htmltest.Text(s[0]), "4.0 KiB") || !strings.Contains(htmltest.Text(s[0]), "1m00s ago") {
		t.Errorf("snapshot: %v", s)
	}
	if ps := htmltest.FindAll(doc, func(n *html.Node) bool { return htmltest.AttrOf(n, "id") == "primary-snapshot" }); len(ps) != 1 || !strings.Contains(htmltest.Text(ps[0]), "snap-1") {
		t.Errorf("the primary's differing snapshot: %v", ps)
	}
	if lag := htmltest.FindAll(doc, func(n *html.Node) bool { return htmltest.AttrOf(n, "class") == "lag" }); len(lag) != 1 || !strings.Contains(htmltest.Text(lag[0]), "93") {
		t.Errorf("lag and offset: %v", lag)
	}
	if app := htmltest.FindAll(doc, func(n *html.Node) bool { return htmltest.AttrOf(n, "data-field") == "app" }); len(app) != 1 || htmltest.Text(app[0]) != "wordcount" {
		t.Errorf("spec app: %v", app)
	}
	if raw := htmltest.FindAll(doc, func(n *html.Node) bool { return htmltest.AttrOf(n, "id") == "raw-spec" }); len(raw) != 1 || !strings.Contains(htmltest.Text(raw[0]), `"hot_standbys": 1`) {
		t.Errorf("raw spec: %v", raw)
	}

	doc = htmltest.Parse(t, render(t, "shard", buildShardPage(self, snap, "bad-0", nil, snapshot.Pointer{}, false, nil, now)))
	if n := htmltest.FindAll(doc, func(n *html.Node) bool {
		return n.Data == "script" || n.Data == "b" && strings.Contains(htmltest.Text(n), "alert")
	}); len(n) != 0 {
		t.Fatalf("markup of an INVALID error became elements: %d", len(n))
	}
	inv := htmltest.FindAll(doc, func(n *html.Node) bool { return htmltest.AttrOf(n, "id") == "invalid" })
	if len(inv) != 1 || !strings.Contains(htmltest.Text(inv[0]), evil) {
		t.Errorf("INVALID error: %v", inv)
	}
}

// TestFormatting: the figures people read.
func TestFormatting(t *testing.T) {
	for d, want := range map[time.Duration]string{
		850 * time.Millisecond: "850ms", 12340 * time.Millisecond: "12.3s", 245 * time.Second: "4m05s",
		3*time.Hour + 12*time.Minute: "3h12m", 52 * time.Hour: "2d04h",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%s) = %q, want %q", d, got, want)
		}
	}
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 64 << 20: "64.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// A replica FAILED because a source lost messages: the shard page names
// the command that accepts the loss (unassigning alone fails again), and
// only there.
func TestShardPageSaysHowToAcceptALostSource(t *testing.T) {
	self, snap, statuses := statusFixture(t)
	lost := "source words/0000 (topic words, partition 0): " + shard.ErrSourceLost.Error() + ": the channel was removed and created again"
	snap.Assignments[2].Status.Error = lost
	self.Replicas[1].Error = lost
	now := time.Date(2026, 12, 1, 10, 0, 3, 0, time.UTC)
	accept := func(id string) []*html.Node {
		doc := htmltest.Parse(t, render(t, "shard", buildShardPage(self, snap, id, statuses, snapshot.Pointer{}, false, nil, now)))
		return htmltest.FindAll(doc, func(n *html.Node) bool { return htmltest.AttrOf(n, "class") == "accept" })
	}
	if a := accept("wc-1"); len(a) != 1 || !strings.Contains(htmltest.Text(a[0]), "consumerd shards accept-source --shard wc-1 --topic words --partition 0 --from start|end --yes") {
		t.Fatalf("the FAILED replica's hint: %v", a)
	}
	if a := accept("wc-0"); len(a) != 0 {
		t.Fatalf("a hint on a shard that lost nothing: %v", a)
	}
}
