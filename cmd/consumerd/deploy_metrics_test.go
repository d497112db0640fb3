package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/internal/waitfor"
)

// TestDeployMetricsServed checks that a live member serves every consumerd_
// metric the Grafana dashboard and the alert rules of deploy/ reference, so
// no panel stays empty and no alert silently never fires because of a name.
// One member on an external etcd and nats-server runs two wordcount shards
// snapshotting every 512 bytes of log, consumes published lines (per-shard
// lag, transactions, snapshots), holds a FAILED shard (an unknown app), and
// restarts a replica after a transient WAL failure (the nats-server is
// replaced by one without JetStream while the replica opens its log): the
// event counters' series exist only after their first event. The test then
// scrapes /metrics until every referenced family is there, and fails naming
// each one that is not, with where it is used. It also checks that
// consumerd_build_info names the binary's build, as `go version -m` does.
func TestDeployMetricsServed(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	refs := deployReferences(t)
	c := newCluster(t, 3*time.Second)
	c.mustRun(nil, "topics", "create", "--name", "words", "--partitions", "2")
	c.mustRun(nil, "topics", "create", "--name", "counts", "--partitions", "2")
	specs := filepath.Join(c.dir, "specs.yaml")
	if err := os.WriteFile(specs, []byte(
		"- {id: wordcount-0000, app: wordcount, sources: [{topic: words, partition: 0}], snapshot_interval_bytes: 512}\n"+
			"- {id: wordcount-0001, app: wordcount, sources: [{topic: words, partition: 1}], snapshot_interval_bytes: 512}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.mustRun(nil, "shards", "apply", "-f", specs)
	m := c.addMember("a", "zone-a")
	c.start(m)
	waitPrimaries := func(what string) {
		waitfor.Until(t, 60*time.Second, what, func() (bool, string) {
			if m.proc.exited() {
				t.Fatalf("member a exited: %v\n%s", m.proc.err, m.proc.tail(30))
			}
			rows, err := c.shards()
			if err != nil {
				return false, err.Error()
			}
			var wc []shardRow
			for _, r := range rows {
				if strings.HasPrefix(r.ID, "wordcount-") {
					wc = append(wc, r)
				}
			}
			return allPrimary(wc, 2, 1)
		})
	}
	waitPrimaries("both wordcount shards PRIMARY")
	var lines strings.Builder
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&lines, "line %d of the deploy test\n", i)
	}
	c.mustRun([]byte(lines.String()), "publish", "--topic", "words")
	waitfor.Until(t, 60*time.Second, "the 200 lines counted", func() (bool, string) {
		out, err := c.run(nil, "query", "--app", "wordcount", "--key", "deploy")
		return err == nil && out == "200\n", fmt.Sprintf("%q %v", out, err)
	})

	// Both shards snapshot (their log passed 512 bytes): the etcd pointers.
	waitfor.Until(t, 60*time.Second, "a snapshot of each wordcount shard", func() (bool, string) {
		resp, err := c.client.Get(context.Background(), "/consumerd/snapshots/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return false, err.Error()
		}
		return resp.Count == 2, fmt.Sprintf("%d snapshot pointers", resp.Count)
	})

	// A FAILED replica: a spec of an app the binary does not know, written
	// to etcd directly (shards apply refuses it).
	if _, err := c.client.Put(context.Background(), "/consumerd/items/bad-0000",
		`{"id":"bad-0000","app":"nope","sources":[{"topic":"words","partition":0}]}`); err != nil {
		t.Fatal(err)
	}
	base := "http://" + m.httpAddr
	waitfor.Until(t, 30*time.Second, "bad-0000 FAILED", func() (bool, string) {
		code, body, err := httpGet(base + "/readyz")
		return err == nil && code == 503 && strings.Contains(string(body), "bad-0000"), fmt.Sprint(code, " ", string(body), err)
	})

	// A transient WAL failure: without JetStream, the reopened replica's
	// recovery log cannot be opened, its retries run out and it restarts.
	c.replaceNATS(false)
	c.mustRun(nil, "shards", "unassign", "--shard", "wordcount-0000")
	waitfor.Until(t, 60*time.Second, "a replica restart after the transient WAL failure", func() (bool, string) {
		_, body, err := httpGet(base + "/metrics")
		return err == nil && strings.Contains(string(body), `consumerd_shard_restarts_total{shard="wordcount-0000"}`), fmt.Sprint(err)
	})
	c.replaceNATS(true)
	waitPrimaries("both wordcount shards PRIMARY again after the outage")

	var served map[string]string
	var missing []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body, err := httpGet(base + "/metrics")
		if err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		served = metricFamilies(string(body))
		missing = missing[:0]
		for name := range refs {
			if servedFamily(name, served) == "" {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	sort.Strings(missing)
	for _, name := range missing {
		t.Errorf("member does not serve %s, referenced by %s", name, strings.Join(refs[name], ", "))
	}
	t.Logf("%d referenced consumerd_ metrics, %d served", len(refs), len(refs)-len(missing))

	// consumerd_build_info names the build of the binary the member runs.
	_, body, _ := httpGet(base + "/metrics")
	v := readGoVersionM(t, c.bin)
	commit := v.settings["vcs.revision"]
	if commit == "" {
		commit = "unknown"
	}
	want := fmt.Sprintf(`consumerd_build_info{commit=%q,go=%q,version=%q} 1`, commit, v.goVersion, v.modVersion)
	if !strings.Contains(string(body), want+"\n") {
		t.Errorf("/metrics lacks %s; has %q", want, regexp.MustCompile(`(?m)^consumerd_build_info.*$`).FindString(string(body)))
	}
}

// metricFamilies maps each family of a text exposition to its type, from
// its # TYPE line (promhttp writes one for every family with a series).
func metricFamilies(exposition string) map[string]string {
	fams := map[string]string{}
	for _, line := range strings.Split(exposition, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			fams[f[2]] = f[3]
		}
	}
	return fams
}

// servedFamily is the family that serves name: name itself, or the
// histogram (or summary) name_bucket, name_sum and name_count belong to;
// "" when none is served.
func servedFamily(name string, fams map[string]string) string {
	if _, ok := fams[name]; ok {
		return name
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		if typ := fams[base]; typ == "histogram" || (typ == "summary" && suffix != "_bucket") {
			return base
		}
	}
	return ""
}

// replaceNATS replaces c's nats-server by a new one on the same port and
// store: with JetStream (js), or without, so that every JetStream request
// fails at once (a transient WAL failure for the members), and waits until
// it accepts connections.
func (c *cluster) replaceNATS(js bool) {
	c.tb.Helper()
	c.nats.kill()
	addr := strings.TrimPrefix(c.natsURL, "nats://")
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		c.tb.Fatalf("nats URL %s: %v", c.natsURL, err)
	}
	args := []string{"-a", host, "-p", port}
	if js {
		args = append(args, "-js", "-sd", filepath.Join(c.dir, "nats"))
	}
	p := startProc(c.tb, "nats-server", filepath.Join(c.dir, "nats.log"), nil, natsServer(c.tb), args...)
	c.tb.Cleanup(p.kill)
	c.nats = p
	waitfor.Until(c.tb, 30*time.Second, "the new nats-server to accept connections", func() (bool, string) {
		if p.exited() {
			c.tb.Fatalf("nats-server exited: %v\n%s", p.err, p.tail(20))
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	})
}

// TestServedFamily checks how a referenced name is matched to the families
// of a scrape: itself, or a histogram's _bucket/_sum/_count.
func TestServedFamily(t *testing.T) {
	fams := metricFamilies(`# HELP a_seconds x
# TYPE a_seconds histogram
a_seconds_bucket{le="+Inf"} 1
# TYPE b_total counter
b_total 1
# TYPE c summary
c_sum 1
`)
	for name, want := range map[string]string{
		"a_seconds_bucket": "a_seconds", "a_seconds_count": "a_seconds", "a_seconds": "a_seconds",
		"b_total": "b_total", "b_total_count": "", "c_sum": "c", "c_bucket": "", "d": "",
	} {
		if got := servedFamily(name, fams); got != want {
			t.Errorf("servedFamily(%q) = %q, want %q", name, got, want)
		}
	}
}
