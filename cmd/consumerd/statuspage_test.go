package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/net/html"

	"github.com/consumerd/consumerd/internal/waitfor"
)

// chromiumBinary finds Chromium, or skips the test saying how to get it.
func chromiumBinary(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("Chromium is not installed (neither chromium nor chromium-browser is on PATH): `make deps` installs the Debian package chromium; skipping the status page test in a real browser")
	return ""
}

// dumpDOM loads url in headless Chromium and parses the DOM it dumps: the
// page as the browser built it (what a person sees), not the bytes served.
func dumpDOM(t *testing.T, chromium, url string) (*html.Node, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
		"--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
		"--user-data-dir="+t.TempDir(), "--dump-dom", url)
	// Its helper processes are in its process group: a timeout ends them all.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("chromium --dump-dom %s: %v: %s", url, err, lastLines(errb.String(), 5))
	}
	doc, err := html.Parse(&out)
	if err != nil {
		return nil, fmt.Errorf("parsing the DOM of %s: %w", url, err)
	}
	return doc, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// elements returns the elements under n for which match holds.
func elements(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	for c := range n.Descendants() {
		if c.Type == html.ElementNode && match(c) {
			out = append(out, c)
		}
	}
	return out
}

func attrVal(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func attrOf(n *html.Node, key string) string { v, _ := attrVal(n, key); return v }

func withAttr(key string) func(*html.Node) bool {
	return func(n *html.Node) bool { _, ok := attrVal(n, key); return ok }
}

func withID(id string) func(*html.Node) bool {
	return func(n *html.Node) bool { return attrOf(n, "id") == id }
}

func textOf(n *html.Node) string {
	var b strings.Builder
	for c := range n.Descendants() {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	}
	return b.String()
}

// etcdView is what the test reads from etcd itself to check a page
// against: members (zone/id) with the leader (lowest CreateRevision),
// shard ids, and assignments.
type etcdView struct {
	members []string
	leader  string
	shards  []string
	assigns []assignment
	pointer struct {
		ID string `json:"id"`
	}
}

func readEtcd(ctx context.Context, c *cluster, pointerOf string) (etcdView, error) {
	var v etcdView
	resp, err := c.client.Get(ctx, "/consumerd/members/", clientv3.WithPrefix())
	if err != nil {
		return v, err
	}
	var lowest int64
	for _, kv := range resp.Kvs {
		key := strings.TrimPrefix(string(kv.Key), "/consumerd/members/")
		v.members = append(v.members, key)
		if lowest == 0 || kv.CreateRevision < lowest {
			lowest, v.leader = kv.CreateRevision, key
		}
	}
	sort.Strings(v.members)
	resp, err = c.client.Get(ctx, "/consumerd/items/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return v, err
	}
	for _, kv := range resp.Kvs {
		v.shards = append(v.shards, strings.TrimPrefix(string(kv.Key), "/consumerd/items/"))
	}
	if v.assigns, err = c.assignments(ctx); err != nil {
		return v, err
	}
	resp, err = c.client.Get(ctx, "/consumerd/snapshots/"+pointerOf)
	if err != nil {
		return v, err
	}
	if len(resp.Kvs) == 1 {
		if err := json.Unmarshal(resp.Kvs[0].Value, &v.pointer); err != nil {
			return v, err
		}
	}
	return v, nil
}

// primaryOf is shard id's slot-0 assignment in v.
func (v etcdView) primaryOf(id string) (assignment, bool) {
	for _, a := range v.assigns {
		if a.shard == id && a.slot == 0 {
			return a, true
		}
	}
	return assignment{}, false
}

// checkClusterPage compares the page at / with etcd: every shard with the
// status `shards list` would give and its primary, every member, the
// leader, the FAILED shard's error, the INVALID one's error as text (no
// element made of its markup), and the figures the primaries report.
func checkClusterPage(doc *html.Node, v etcdView, invalid, failed, snapshotted string) error {
	if n := elements(doc, func(n *html.Node) bool { return n.Data == "script" }); len(n) != 0 {
		return fmt.Errorf("%d script elements in the page: markup in a value was not escaped", len(n))
	}
	if l := elements(doc, withID("leader")); len(l) != 1 || attrOf(l[0], "data-leader") != v.leader {
		return fmt.Errorf("the page's leader %v, etcd's %s", l, v.leader)
	}
	rows := map[string]*html.Node{}
	for _, n := range elements(doc, withAttr("data-shard")) {
		rows[attrOf(n, "data-shard")] = n
	}
	if len(rows) != len(v.shards) {
		return fmt.Errorf("%d shards on the page, %d in etcd", len(rows), len(v.shards))
	}
	for _, id := range v.shards {
		row := rows[id]
		if row == nil {
			return fmt.Errorf("shard %s is in etcd, not on the page", id)
		}
		wantStatus, wantPrimary := "UNASSIGNED", ""
		if a, ok := v.primaryOf(id); ok {
			wantStatus, wantPrimary = a.state, a.zone+"/"+a.member
		}
		if id == invalid {
			wantStatus = "INVALID"
		}
		if got := attrOf(row, "data-status"); got != wantStatus {
			return fmt.Errorf("shard %s: status %s on the page, %s in etcd", id, got, wantStatus)
		}
		if got := attrOf(row, "data-primary"); got != wantPrimary {
			return fmt.Errorf("shard %s: primary %q on the page, %q in etcd", id, got, wantPrimary)
		}
	}
	if f := elements(rows[failed], withAttr("data-replica")); len(f) != 1 || !strings.Contains(textOf(f[0]), `unknown app "nope"`) {
		return fmt.Errorf("FAILED shard %s: errors shown %q", failed, textOf(rows[failed]))
	}
	if !strings.Contains(textOf(rows[invalid]), "<script>") {
		return fmt.Errorf("INVALID shard %s: its error is not shown as text: %q", invalid, textOf(rows[invalid]))
	}
	snap := rows[snapshotted]
	if sb := elements(snap, withAttr("data-replay-lag")); len(sb) != 1 || attrOf(sb[0], "data-replay-lag") == "" {
		return fmt.Errorf("shard %s: standby and its replay lag: %q", snapshotted, textOf(snap))
	}
	if lc := elements(snap, withAttr("data-last-commit")); len(lc) != 1 || attrOf(lc[0], "data-last-commit") == "" {
		return fmt.Errorf("shard %s: no last commit shown: %q", snapshotted, textOf(snap))
	}
	if lb := elements(snap, withAttr("data-log-bytes")); len(lb) != 1 || attrOf(lb[0], "data-log-bytes") == "" {
		return fmt.Errorf("shard %s: no log bytes since the snapshot shown: %q", snapshotted, textOf(snap))
	}
	if lag := elements(snap, withAttr("data-lag")); len(lag) != 1 || attrOf(lag[0], "data-channel") != "words/0000" || attrOf(lag[0], "data-lag") != "0" {
		return fmt.Errorf("shard %s: lag shown %q, want words/0000 at 0", snapshotted, textOf(snap))
	}
	members := map[string]*html.Node{}
	for _, n := range elements(doc, func(n *html.Node) bool { return attrOf(n, "class") == "member" }) {
		members[attrOf(n, "data-member")] = n
	}
	if len(members) != len(v.members) {
		return fmt.Errorf("%d members on the page, %d in etcd", len(members), len(v.members))
	}
	for _, key := range v.members {
		m := members[key]
		if m == nil {
			return fmt.Errorf("member %s is in etcd, not on the page", key)
		}
		if got, want := attrOf(m, "data-leader"), fmt.Sprint(key == v.leader); got != want {
			return fmt.Errorf("member %s: leader %s on the page, %s in etcd", key, got, want)
		}
		prim, stby := 0, 0
		for _, a := range v.assigns {
			if a.zone+"/"+a.member == key {
				if a.slot == 0 {
					prim++
				} else {
					stby++
				}
			}
		}
		if attrOf(m, "data-primaries") != fmt.Sprint(prim) || attrOf(m, "data-standbys") != fmt.Sprint(stby) {
			return fmt.Errorf("member %s: %s primaries and %s standbys on the page, %d and %d in etcd", key, attrOf(m, "data-primaries"), attrOf(m, "data-standbys"), prim, stby)
		}
		if a := elements(m, func(n *html.Node) bool { return n.Data == "a" }); len(a) != 1 || !strings.HasPrefix(attrOf(a[0], "href"), "http://127.0.0.1:") {
			return fmt.Errorf("member %s: endpoint link %v", key, a)
		}
	}
	return nil
}

// checkShardPage compares /shards/<id> with etcd: status, primary, every
// replica with its state, the snapshot etcd points at, the spec, the
// primary's position.
func checkShardPage(doc *html.Node, v etcdView, id string) error {
	h := elements(doc, withID("shard"))
	a, ok := v.primaryOf(id)
	if len(h) != 1 || !ok || attrOf(h[0], "data-shard") != id || attrOf(h[0], "data-status") != a.state || attrOf(h[0], "data-primary") != a.zone+"/"+a.member {
		return fmt.Errorf("shard page heading %v; etcd's primary %+v", h, a)
	}
	var want []string
	for _, a := range v.assigns {
		if a.shard == id {
			want = append(want, fmt.Sprintf("%s/%s:%d=%s", a.zone, a.member, a.slot, a.state))
		}
	}
	var got []string
	for _, r := range elements(doc, func(n *html.Node) bool { return attrOf(n, "class") == "replica" }) {
		got = append(got, fmt.Sprintf("%s:%s=%s", attrOf(r, "data-member"), attrOf(r, "data-slot"), attrOf(r, "data-state")))
		if attrOf(r, "data-live") == "" || attrOf(r, "data-applied") == "" {
			return fmt.Errorf("replica %s: its member's report is missing: %q", attrOf(r, "data-member"), textOf(r))
		}
	}
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		return fmt.Errorf("replicas on the page %v, in etcd %v", got, want)
	}
	if s := elements(doc, withID("snapshot")); v.pointer.ID == "" || len(s) != 1 || attrOf(s[0], "data-snapshot-id") != v.pointer.ID {
		return fmt.Errorf("last snapshot on the page %v, etcd's pointer %q", s, v.pointer.ID)
	}
	if p := elements(doc, withAttr("data-position")); len(p) != 1 || attrOf(p[0], "data-position") == "" {
		return fmt.Errorf("recovery-log position: %v", p)
	}
	if app := elements(doc, func(n *html.Node) bool { return attrOf(n, "data-field") == "app" }); len(app) != 1 || textOf(app[0]) != "wordcount" {
		return fmt.Errorf("spec app: %v", app)
	}
	if src := elements(doc, func(n *html.Node) bool { return attrOf(n, "class") == "source" }); len(src) != 1 || attrOf(src[0], "data-channel") != "words/0000" {
		return fmt.Errorf("spec sources: %v", src)
	}
	return nil
}

// TestStatusPageInChromium runs two members (two zones) with wordcount
// shards and a hot standby each, publishes lines, makes one shard FAILED
// (an unknown app) and one INVALID (a spec whose app holds markup), then
// loads each member's status page in headless Chromium and checks the DOM
// it built against etcd: every shard with the status and primary etcd
// gives, every member with its counts, the leader, the FAILED error, the
// markup shown as text; then a shard's page (replicas, snapshot, spec) and
// an unknown shard's 404.
func TestStatusPageInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process status page test skipped in -short mode")
	}
	chromium := chromiumBinary(t)
	c := newCluster(t, 3*time.Second)
	c.mustRun(nil, "topics", "create", "--name", "words", "--partitions", "2")
	c.mustRun(nil, "topics", "create", "--name", "counts", "--partitions", "2")
	c.mustRun(nil, "shards", "create", "--app", "wordcount", "--hot-standbys", "1")
	// Small snapshots on wordcount-0000, so its page has one to show.
	specs := filepath.Join(c.dir, "specs.yaml")
	if err := os.WriteFile(specs, []byte("- {id: wordcount-0000, app: wordcount, sources: [{topic: words, partition: 0}], hot_standbys: 1, snapshot_interval_bytes: 512}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.mustRun(nil, "shards", "apply", "-f", specs)
	m1, m2 := c.addMember("m1", "zone-a"), c.addMember("m2", "zone-b")
	c.start(m1)
	c.start(m2)
	waitfor.Until(t, 90*time.Second, "both shards PRIMARY with a hot standby", func() (bool, string) {
		rows, err := c.shards()
		if err != nil {
			return false, err.Error()
		}
		return allPrimary(rows, 2, 2)
	})

	var lines strings.Builder
	for i := range 200 {
		fmt.Fprintf(&lines, "line %d of the status page test\n", i)
	}
	c.mustRun([]byte(lines.String()), "publish", "--topic", "words")
	waitfor.Until(t, 60*time.Second, "every line counted", func() (bool, string) {
		out, err := c.run(nil, "query", "--app", "wordcount", "--key", "line")
		return err == nil && out == "200\n", fmt.Sprintf("%q %v", out, err)
	})
	ctx := t.Context()
	if _, err := c.client.Put(ctx, "/consumerd/items/bad-0000", `{"id":"bad-0000","app":"nope","sources":[{"topic":"words","partition":1}]}`); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.Put(ctx, "/consumerd/items/evil-0000", `{"id":"evil-0000","app":"<script>document.title='pwned'</script>","sources":[{"topic":"words","partition":1}]}`); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 60*time.Second, "bad-0000 FAILED in etcd", func() (bool, string) {
		as, err := c.assignments(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, a := range as {
			if a.shard == "bad-0000" && a.slot == 0 {
				return a.state == "FAILED", a.state
			}
		}
		return false, "unassigned"
	})

	for _, m := range []*member{m1, m2} {
		base := "http://" + m.httpAddr
		// States settle (a standby catches up, a snapshot moves the
		// pointer): compare each fresh page with a fresh read of etcd.
		waitfor.Until(t, 60*time.Second, "the page of "+m.id+" to agree with etcd", func() (bool, string) {
			doc, err := dumpDOM(t, chromium, base+"/")
			if err != nil {
				return false, err.Error()
			}
			v, err := readEtcd(ctx, c, "wordcount-0000")
			if err != nil {
				return false, err.Error()
			}
			if err := checkClusterPage(doc, v, "evil-0000", "bad-0000", "wordcount-0000"); err != nil {
				return false, err.Error()
			}
			if title := elements(doc, func(n *html.Node) bool { return n.Data == "title" }); len(title) != 1 || strings.Contains(textOf(title[0]), "pwned") {
				return false, fmt.Sprintf("title %q: a script ran", textOf(title[0]))
			}
			return true, ""
		})
		waitfor.Until(t, 60*time.Second, "the shard page on "+m.id+" to agree with etcd", func() (bool, string) {
			doc, err := dumpDOM(t, chromium, base+"/shards/wordcount-0000")
			if err != nil {
				return false, err.Error()
			}
			v, err := readEtcd(ctx, c, "wordcount-0000")
			if err != nil {
				return false, err.Error()
			}
			if err := checkShardPage(doc, v, "wordcount-0000"); err != nil {
				return false, err.Error()
			}
			return true, ""
		})
	}

	doc, err := dumpDOM(t, chromium, "http://"+m2.httpAddr+"/shards/bad-0000")
	if err != nil {
		t.Fatal(err)
	}
	if f := elements(doc, withAttr("data-replica")); len(f) != 1 || !strings.Contains(textOf(f[0]), `unknown app "nope"`) {
		t.Errorf("/shards/bad-0000: FAILED error %v", f)
	}
	doc, err = dumpDOM(t, chromium, "http://"+m1.httpAddr+"/shards/nope-0000")
	if err != nil {
		t.Fatal(err)
	}
	if e := elements(doc, withID("error")); len(e) != 1 || !strings.Contains(textOf(e[0]), "no shard nope-0000 in etcd") {
		t.Errorf("/shards/nope-0000: %v", e)
	}
	if code, body, err := httpGet("http://" + m1.httpAddr + "/shards/nope-0000"); err != nil || code != 404 {
		t.Errorf("/shards/nope-0000: %d %v %.200s", code, err, body)
	}
}
