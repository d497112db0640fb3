package daemon

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/daemon/internal/buildinfo"
	"github.com/consumerd/consumerd/daemon/internal/htmltest"
	"github.com/consumerd/consumerd/internal/waitfor"
	"golang.org/x/net/html"
)

// get fetches u and returns the status, the Content-Type and the body.
func get(t *testing.T, u string) (int, string, []byte) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// TestStatusPagesServed runs a member in-process against real etcd and
// NATS and checks what it serves: /v1/status with the version, uptime,
// etcd and NATS health and a primary's last commit (and no bytes since a
// snapshot: snapshots are off); the page at / listing the shards; a
// shard's page; a 404 naming an unknown shard and a 400 naming an invalid
// id; other paths still 404.
func TestStatusPagesServed(t *testing.T) {
	c := newCLI(t)
	c.wordcountShards(2)
	base := c.serve()
	c.allPrimary(2)
	c.ok("the cat\nthe dog\na bird\n", "publish", "--topic", "words")

	var st api.StatusResponse
	waitfor.Until(t, time.Minute, "a primary's last commit in /v1/status", func() (bool, string) {
		st = api.StatusResponse{}
		if code := httpJSON(t, base+"/v1/status", &st); code != http.StatusOK {
			return false, fmt.Sprint(code)
		}
		for _, r := range st.Replicas {
			if r.LastCommit != nil {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", st.Replicas)
	})
	if st.Version == "" || st.Version != buildinfo.Current.Version || st.Build == "" || st.UptimeSeconds <= 0 {
		t.Errorf("version %q (want %q), build %q, uptime %v", st.Version, buildinfo.Current.Version, st.Build, st.UptimeSeconds)
	}
	if !st.Etcd.Session || st.Etcd.Connection != "READY" || st.Etcd.LastError != "" {
		t.Errorf("etcd health %+v", st.Etcd)
	}
	if !st.NATS.Connected || st.NATS.URL != c.nats || st.NATS.ServerVersion == "" {
		t.Errorf("NATS health %+v, want connected to %s", st.NATS, c.nats)
	}
	for _, r := range st.Replicas {
		if r.LogBytesSinceSnapshot != nil || r.LastSnapshot != nil {
			t.Errorf("replica %s: snapshot figures with snapshots off: %v %v", r.Shard, r.LogBytesSinceSnapshot, r.LastSnapshot)
		}
		if r.LastCommit != nil && time.Since(*r.LastCommit) > time.Minute {
			t.Errorf("replica %s: last commit %v", r.Shard, r.LastCommit)
		}
	}

	code, ctype, body := get(t, base+"/")
	if code != http.StatusOK || !strings.HasPrefix(ctype, "text/html") {
		t.Fatalf("GET /: %d %s", code, ctype)
	}
	doc := htmltest.Parse(t, body)
	rows := htmltest.ByAttr(htmltest.FindAll(doc, htmltest.HasAttr("data-shard")), "data-shard")
	for _, id := range []string{"wordcount-0000", "wordcount-0001"} {
		if r := rows[id]; r == nil || htmltest.AttrOf(r, "data-status") != "PRIMARY" || htmltest.AttrOf(r, "data-primary") != "local/m1" {
			t.Errorf("GET /: shard %s row %v", id, r)
		}
	}
	if l := htmltest.FindAll(doc, func(n *html.Node) bool { return htmltest.AttrOf(n, "id") == "leader" }); len(l) != 1 || htmltest.AttrOf(l[0], "data-leader") != "local/m1" {
		t.Errorf("GET /: leader %v", l)
	}

	code, _, body = get(t, base+"/shards/wordcount-0001")
	if code != http.StatusOK {
		t.Fatalf("GET /shards/wordcount-0001: %d %s", code, body)
	}
	if h := htmltest.FindAll(htmltest.Parse(t, body), func(n *html.Node) bool { return htmltest.AttrOf(n, "id") == "shard" }); len(h) != 1 || htmltest.AttrOf(h[0], "data-status") != "PRIMARY" {
		t.Errorf("shard page heading %v", h)
	}
	for path, want := range map[string]struct {
		code int
		text string
	}{
		"/shards/wordcount-0009": {http.StatusNotFound, "no shard wordcount-0009 in etcd"},
		"/shards/a%20b":          {http.StatusBadRequest, `shard id "a b": character ' '`},
		"/shards/%3Cb%3Ex":       {http.StatusBadRequest, `shard id "<b>x"`},
		"/nope":                  {http.StatusNotFound, ""},
	} {
		code, _, body := get(t, base+path)
		if code != want.code {
			t.Errorf("GET %s: %d, want %d: %s", path, code, want.code, body)
			continue
		}
		if want.text == "" {
			continue
		}
		e := htmltest.FindAll(htmltest.Parse(t, body), func(n *html.Node) bool { return htmltest.AttrOf(n, "id") == "error" })
		if len(e) != 1 || !strings.Contains(htmltest.Text(e[0]), want.text) {
			t.Errorf("GET %s: error %q, want it to say %q", path, body, want.text)
		}
	}
}
