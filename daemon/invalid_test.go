package daemon

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/consumerd/consumerd/internal/waitfor"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestInvalidShardSpecIsNeverSilent: a shard spec overwritten with junk by
// hand (as `etcdctl put /consumerd/items/wordcount-0000 junk` does) shows in
// `shards list` as INVALID with the decode error; every query over the app
// (CLI key and --all, HTTP key and all=1) fails naming the shard and the fix,
// unless a partial answer was asked for, which then says so; and writing a
// valid spec back brings the exact count back from the recovery log.
func TestInvalidShardSpecIsNeverSilent(t *testing.T) {
	c := newCLI(t)
	c.wordcountShards(4)
	base := c.serve()
	c.allPrimary(4)

	const lines = 40
	var in strings.Builder
	for i := range lines {
		fmt.Fprintf(&in, "the w%d\n", i)
	}
	c.ok(in.String(), "publish", "--topic", "words")
	waitfor.Until(t, time.Minute, "every line counted", func() (bool, string) {
		out, errs, _ := c.run("", "query", "--app", "wordcount", "--key", "the")
		return out == fmt.Sprintf("%d\n", lines), out + errs
	})
	// /v1/query?all=1 is the app's whole answer, merged over every shard.
	var all api.QueryResponse
	if code := httpJSON(t, base+"/v1/query?app=wordcount&all=1", &all); code != 200 {
		t.Fatalf("/v1/query all=1: %d", code)
	}
	merged, err := api.DecodeEntries(all.Entries)
	if err != nil || len(all.Shards) != 4 || len(merged) != lines+1 || merged["the"] != strconv.Itoa(lines) {
		t.Fatalf("/v1/query all=1: %d shards, %d merged keys (the=%s, %v); want 4 shards, %d keys, the=%d",
			len(all.Shards), len(merged), merged["the"], err, lines+1, lines)
	}
	// How many of the lines the shard about to be damaged holds.
	var own api.QueryResponse
	if code := httpJSON(t, base+"/v1/query?app=wordcount&shard=wordcount-0000&key=the", &own); code != 200 {
		t.Fatalf("/v1/query shard=wordcount-0000: %d", code)
	}
	vals, err := api.DecodeEntries(own.Shards["wordcount-0000"])
	held, _ := strconv.Atoi(vals["the"])
	if err != nil || held == 0 {
		t.Fatalf("wordcount-0000 holds %q of the (%v); the test needs it to hold some", vals["the"], err)
	}

	cl := etcdtest.NewClient(t, strings.Split(c.etcd, ","))
	if _, err := cl.Put(t.Context(), "/consumerd/items/wordcount-0000", "junk"); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, time.Minute, "shards list to show wordcount-0000 INVALID", func() (bool, string) {
		out, errs, _ := c.run("", "shards", "list")
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "wordcount-0000 ") && strings.Contains(l, "INVALID: ") && strings.Contains(l, "invalid character 'j'") {
				return true, ""
			}
		}
		return false, out + errs
	})
	var rows []api.ShardRow
	if err := json.Unmarshal([]byte(c.ok("", "shards", "list", "-o", "json")), &rows); err != nil || len(rows) != 4 ||
		rows[0].ID != "wordcount-0000" || rows[0].Status != api.StatusInvalid || rows[0].Error == "" {
		t.Fatalf("shards list -o json: %+v (%v); want 4 rows, wordcount-0000 INVALID with its error", rows, err)
	}

	// Complete answers are refused, naming the shard and the way out.
	for _, args := range [][]string{{"--key", "the"}, {"--all"}} {
		_, errs, code := c.run("", append([]string{"query", "--app", "wordcount"}, args...)...)
		if code != 1 || !strings.Contains(errs, `"wordcount-0000": invalid character 'j'`) ||
			!strings.Contains(errs, "consumerd shards apply") || !strings.Contains(errs, "--partial") {
			t.Fatalf("query %v over an invalid spec: exit %d, stderr %q; want exit 1 naming wordcount-0000, shards apply and --partial", args, code, errs)
		}
	}
	var eb api.ErrorResponse
	for _, q := range []string{"key=the", "all=1"} {
		if code := httpJSON(t, base+"/v1/query?app=wordcount&"+q, &eb); code != 503 || !strings.Contains(eb.Error, `"wordcount-0000": invalid`) || !strings.Contains(eb.Error, "partial=1") {
			t.Fatalf("/v1/query?%s over an invalid spec: %d %q; want 503 naming wordcount-0000 and partial=1", q, code, eb.Error)
		}
	}
	// Partial answers, when asked for, say they are partial.
	want := strconv.Itoa(lines - held)
	waitfor.Until(t, time.Minute, "a partial answer without wordcount-0000", func() (bool, string) {
		out, errs, code := c.run("", "query", "--app", "wordcount", "--key", "the", "--partial")
		return code == 0 && out == want+"\n" && strings.Contains(errs, "WARNING (--partial)") && strings.Contains(errs, `"wordcount-0000": invalid`),
			fmt.Sprintf("exit %d, %q, stderr %q; want %s", code, out, errs, want)
	})
	var part api.QueryResponse
	if code := httpJSON(t, base+"/v1/query?app=wordcount&key=the&partial=1", &part); code != 200 ||
		part.Value == nil || *part.Value != want || !strings.Contains(part.Partial, `"wordcount-0000": invalid`) {
		t.Fatalf("/v1/query partial=1: %d, %+v; want %s and the missing shard named", code, part, want)
	}

	// A valid spec again: the shard's state comes back from its log, exactly.
	fix := t.TempDir() + "/fix.yaml"
	writeFile(t, fix, "- id: wordcount-0000\n  app: wordcount\n  sources: [{topic: words, partition: 0}]\n")
	c.ok("", "shards", "apply", "-f", fix)
	waitfor.Until(t, time.Minute, "the exact count back after the fix", func() (bool, string) {
		out, errs, code := c.run("", "query", "--app", "wordcount", "--key", "the")
		return code == 0 && out == fmt.Sprintf("%d\n", lines) && errs == "", fmt.Sprintf("exit %d, %q, stderr %q", code, out, errs)
	})
}

// TestUndecodableAssignmentHeals: the primary's assignment key overwritten
// with junk (`etcdctl put /consumerd/assign/wordcount-0000/<zone>/<member>/0
// junk`) does not wedge the shard: the leader deletes the key, assigns the
// shard again, and counts stay exact.
func TestUndecodableAssignmentHeals(t *testing.T) {
	c := newCLI(t)
	c.wordcountShards(2)
	c.serve()
	c.allPrimary(2)
	cl := etcdtest.NewClient(t, strings.Split(c.etcd, ","))
	resp, err := cl.Get(t.Context(), "/consumerd/assign/wordcount-0000/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 || !strings.HasSuffix(string(resp.Kvs[0].Key), "/0") {
		t.Fatalf("assignments of wordcount-0000: %v (%v); want one slot-0 key", resp, err)
	}
	key := string(resp.Kvs[0].Key)
	if _, err := cl.Put(t.Context(), key, "junk"); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, time.Minute, "the leader to replace the junk and the shard to be PRIMARY again", func() (bool, string) {
		g, err := cl.Get(t.Context(), key)
		if err != nil || len(g.Kvs) == 0 || string(g.Kvs[0].Value) == "junk" {
			return false, fmt.Sprintf("%s: %v %v", key, g, err)
		}
		st, out := c.statuses()
		return st["wordcount-0000"] == "PRIMARY" && st["wordcount-0001"] == "PRIMARY", out
	})
	c.ok(strings.Repeat("the end\n", 30), "publish", "--topic", "words")
	waitfor.Until(t, time.Minute, "exact counts", func() (bool, string) {
		out, errs, _ := c.run("", "query", "--app", "wordcount", "--key", "the")
		return out == "30\n", out + errs
	})
}

// TestShardsDelete: shards delete needs exactly one selector and --yes,
// deletes one shard (a spec that does not decode too), every shard of an
// app, or all, and names the partitions it leaves unread.
func TestShardsDelete(t *testing.T) {
	c := newCLI(t)
	c.wordcountShards(4)
	ids := func() string {
		st, out := c.statuses()
		if st == nil {
			t.Fatal(out)
		}
		var s []string
		for id := range st {
			s = append(s, id)
		}
		sort.Strings(s)
		return strings.Join(s, ",")
	}
	c.fails(2, "give exactly one of --shard ID, --app A or --all", "", "shards", "delete")
	c.fails(2, "give exactly one of", "", "shards", "delete", "--all", "--app", "wordcount")
	c.fails(2, "this deletes 1 shard spec(s) (wordcount-0001): run again with --yes", "", "shards", "delete", "--shard", "wordcount-0001")
	c.fails(1, `no shard "nope"`, "", "shards", "delete", "--shard", "nope", "--yes")
	c.fails(2, `--app: `, "", "shards", "delete", "--app", "nope", "--yes")
	if got := ids(); got != "wordcount-0000,wordcount-0001,wordcount-0002,wordcount-0003" {
		t.Fatalf("nothing deleted yet, but shards are %s", got)
	}
	out, errs, code := c.run("", "shards", "delete", "--shard", "wordcount-0001", "--yes")
	if code != 0 || out != "deleted 1 shard(s)\n" || !strings.Contains(errs, "topic words: no shard reads partition(s) 1 of 4") {
		t.Fatalf("delete --shard: exit %d, %q, stderr %q; want 1 deleted and words/0001 named unread", code, out, errs)
	}
	cl := etcdtest.NewClient(t, strings.Split(c.etcd, ","))
	if _, err := cl.Put(t.Context(), "/consumerd/items/wordcount-0002", "junk"); err != nil {
		t.Fatal(err)
	}
	if out := c.ok("", "shards", "delete", "--app", "wordcount", "--yes"); out != "deleted 2 shard(s)\n" {
		t.Fatalf("delete --app: %q", out)
	}
	if got := ids(); got != "wordcount-0002" {
		t.Fatalf("after delete --app: %s; want only the invalid wordcount-0002 left", got)
	}
	if out := c.ok("", "shards", "delete", "--all", "--yes"); out != "deleted 1 shard(s)\n" {
		t.Fatalf("delete --all: %q", out)
	}
	if got := ids(); got != "" {
		t.Fatalf("after delete --all: %s", got)
	}
}
