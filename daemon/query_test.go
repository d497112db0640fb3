package daemon

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
)

// lastValue is a keyed app: it keeps each key's last payload ("v/<key>" →
// payload), so a key lives only on the shard reading its partition of
// topic "kv".
type lastValue struct{}

func (lastValue) Consume(s shard.Shard, env topic.Envelope, _ shard.Publisher) error {
	s.Transaction().Put([]byte("v/"+env.Message.Key), env.Message.Payload)
	return nil
}

func (lastValue) Flush(shard.Shard, shard.Publisher) error { return nil }

// askLog counts the queries each shard's app answered (Query or Scan): what
// the query's routing asked.
type askLog struct {
	mu    sync.Mutex
	asked map[string]int
}

func (l *askLog) record(s shard.Shard) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asked[s.ID()]++
}

// take returns and resets the counts, as "shard=n,..." sorted.
func (l *askLog) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id, n := range l.asked {
		out = append(out, fmt.Sprintf("%s=%d", id, n))
	}
	sort.Strings(out)
	l.asked = map[string]int{}
	return strings.Join(out, ",")
}

// counted wraps app's Query and Scan to record every shard asked.
func counted(app shard.App, l *askLog) shard.App {
	q, sc := app.Query, app.Scan
	app.Query = func(s shard.Shard, key string) (string, bool, error) { l.record(s); return q(s, key) }
	app.Scan = func(s shard.Shard, fn func(k, v string) error) error { l.record(s); return sc(s, fn) }
	return app
}

func lastValueApp() shard.App {
	return shard.App{
		Name:        "lastvalue",
		Topics:      []string{"kv"},
		KeyedBy:     "kv",
		NewConsumer: func() shard.Consumer { return lastValue{} },
		Query: func(s shard.Shard, key string) (string, bool, error) {
			v, err := s.Get([]byte("v/" + key))
			return string(v), v != nil, err
		},
		Scan: func(s shard.Shard, fn func(k, v string) error) error {
			it := s.Database().NewIterator(s.ReadOptions())
			defer it.Close()
			for it.Seek([]byte("v/")); it.ValidForPrefix([]byte("v/")); it.Next() {
				k, v := it.Key(), it.Value()
				key, val := string(k.Data()[2:]), string(v.Data())
				k.Free()
				v.Free()
				if err := fn(key, val); err != nil {
					return err
				}
			}
			return it.Err()
		},
	}
}

// serve runs one member in-process against c's etcd and NATS until the test
// ends, and returns its HTTP base URL.
func (c *harness) serve() string {
	c.t.Helper()
	base, _ := c.serveDir(c.t.TempDir())
	return base
}

// serveDir runs member m1 with its data in dir; stop (also run at the
// test's end) stops it and waits until it exited.
func (c *harness) serveDir(dir string) (base string, stop func()) {
	c.t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(c.t))
	logs := newWatchBuffer()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--etcd.endpoints", c.etcd, "--wal.url", c.nats,
			"--data-dir", dir, "--http.addr", addr, "--member.id", "m1", "--snapshot.store", "none"},
			Options{Apps: c.apps, Stderr: logs, Signals: make(chan os.Signal)})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if code := <-done; code != 0 || c.t.Failed() {
				logs.mu.Lock()
				c.t.Logf("serve exited %d; its log:\n%s", code, logs.b.String())
				logs.mu.Unlock()
			}
		})
	}
	c.t.Cleanup(stop)
	return "http://" + addr, stop
}

// wordcountShards creates wordcount's topics with n partitions each and
// its n shards (no member runs yet).
func (c *harness) wordcountShards(n int) {
	c.t.Helper()
	for _, tp := range []string{"words", "counts"} {
		c.ok("", "topics", "create", "--name", tp, "--partitions", strconv.Itoa(n))
	}
	c.ok("", "shards", "create", "--app", "wordcount")
}

// statuses returns each shard's status in shards list -o json.
func (c *harness) statuses() (map[string]string, string) {
	out, errs, code := c.run("", "shards", "list", "-o", "json")
	var rows []api.ShardRow
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
		return nil, out + errs
	}
	st := map[string]string{}
	for _, r := range rows {
		st[r.ID] = r.Status
	}
	return st, out
}

// allPrimary waits until n shards are PRIMARY.
func (c *harness) allPrimary(n int) {
	c.t.Helper()
	waitfor.Until(c.t, time.Minute, fmt.Sprintf("%d shards PRIMARY", n), func() (bool, string) {
		out, _, code := c.run("", "shards", "list", "-o", "json")
		var rows []api.ShardRow
		if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
			return false, out
		}
		primary := 0
		for _, r := range rows {
			if r.Status == "PRIMARY" {
				primary++
			}
		}
		return primary == n, out
	})
}

func httpJSON(t *testing.T, u string, into any) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("GET %s: %v: %.300s", u, err, b)
		}
	} else if eb, ok := into.(*api.ErrorResponse); ok {
		_ = json.Unmarshal(b, eb)
	}
	return resp.StatusCode
}

// TestQueryBytesAndRouting runs one member with a keyed app (lastvalue) and
// wordcount against real etcd and NATS: keys and values that are not UTF-8
// (and a ~1 MiB value) round-trip through publish, read and query; a keyed
// app's key query asks only the shard owning the key's partition, over the
// CLI and over HTTP; wordcount's fans out; query --all never merges keys
// that differ only in bytes that are not UTF-8.
func TestQueryBytesAndRouting(t *testing.T) {
	c := newCLI(t)
	var asked askLog
	asked.take()
	c.apps = []shard.App{counted(lastValueApp(), &asked), counted(wordcount.App(), &asked)}
	for _, tp := range []string{"kv", "words", "counts"} {
		c.ok("", "topics", "create", "--name", tp, "--partitions", "4")
	}
	c.ok("", "shards", "create", "--app", "lastvalue")
	c.ok("", "shards", "create", "--app", "wordcount")
	base := c.serve()
	c.allPrimary(8)

	big := bigPayload()
	kvs := map[string]string{"k\xff\x00z": "\xfe binary value", "plain": "v1", "big": big, "": "empty key's value", "a\xffb": "1", "a\xfeb": "2"}
	var in strings.Builder
	for k, v := range kvs {
		in.WriteString(k + "\t" + v + "\n")
	}
	c.ok(in.String(), "publish", "--topic", "kv", "--format", "kv")
	// Six tokens that differ only in a byte that is not UTF-8: JSON would
	// turn every one into "t\uFFFD".
	c.ok("t\xff t\xfe t\xfd t\xfc t\xfb t\xfa\nt\xff t\xff\n", "publish", "--topic", "words")

	// read -o json: the same bytes as published.
	got := map[string]string{}
	for _, m := range decodeRead(t, c.ok("", "read", "--topic", "kv", "-o", "json")) {
		if m.partition != topic.PartitionFor(m.key, 4) {
			t.Errorf("key %q read from partition %d, want %d", m.key, m.partition, topic.PartitionFor(m.key, 4))
		}
		got[m.key] = m.value
	}
	if fmt.Sprint(got) != fmt.Sprint(kvs) {
		t.Fatalf("read -o json gave %d keys; want %d, byte for byte", len(got), len(kvs))
	}

	// query --all: every key, none merged; --hex-keys shows them exactly.
	hexKeys := func(vals map[string]string) string {
		var lines []string
		for k, v := range vals {
			lines = append(lines, hex.EncodeToString([]byte(k))+" "+v+"\n")
		}
		sort.Strings(lines)
		return strings.Join(lines, "")
	}
	counts := map[string]string{"t\xff": "3", "t\xfe": "1", "t\xfd": "1", "t\xfc": "1", "t\xfb": "1", "t\xfa": "1"}
	waitfor.Until(t, time.Minute, "wordcount to count six distinct tokens", func() (bool, string) {
		out, errs, _ := c.run("", "query", "--app", "wordcount", "--all", "--hex-keys")
		return out == hexKeys(counts), out + errs
	})
	waitfor.Until(t, time.Minute, "lastvalue to hold every key", func() (bool, string) {
		out, errs, _ := c.run("", "query", "--app", "lastvalue", "--all", "--hex-keys")
		return out == hexKeys(kvs), fmt.Sprintf("%.300q %s", out, errs)
	})
	asked.take()
	out, errs, code := c.run("", "query", "--app", "wordcount", "--all")
	if code != 0 || out != "t\xfa 1\nt\xfb 1\nt\xfc 1\nt\xfd 1\nt\xfe 1\nt\xff 3\n" || !strings.Contains(errs, "WARNING: 6 key(s) are empty, not UTF-8") {
		t.Fatalf("query --all: exit %d, %q, stderr %q", code, out, errs)
	}
	if got := asked.take(); got != "wordcount-0000=1,wordcount-0001=1,wordcount-0002=1,wordcount-0003=1" {
		t.Fatalf("query --all asked %s, want every shard once", got)
	}

	// A keyed app's key query asks only the owner of the key's partition.
	owner := func(k string) string { return fmt.Sprintf("lastvalue-%04d", topic.PartitionFor(k, 4)) }
	for k, v := range kvs {
		out := c.ok("", "query", "--app", "lastvalue", "--key-hex", hex.EncodeToString([]byte(k)))
		if out != v+"\n" {
			t.Errorf("query --key-hex of %q: %d bytes %.40q, want %d bytes %.40q", k, len(out), out, len(v)+1, v)
		}
		if got := asked.take(); got != owner(k)+"=1" {
			t.Errorf("query --key-hex of %q asked %s, want only %s", k, got, owner(k))
		}
	}
	if out := c.ok("", "query", "--app", "lastvalue", "--key", ""); out != "empty key's value\n" {
		t.Errorf("query --key \"\": %q", out)
	}
	if got := asked.take(); got != owner("")+"=1" {
		t.Errorf("query --key \"\" asked %s, want only %s", got, owner(""))
	}
	c.fails(1, fmt.Sprintf(`key "missing" not found in app lastvalue (asked %s: it reads partition %d of topic kv, where publish places the key)`,
		owner("missing"), topic.PartitionFor("missing", 4)), "", "query", "--app", "lastvalue", "--key", "missing")
	asked.take()
	// wordcount is not keyed: its key query asks every shard and sums.
	if out := c.ok("", "query", "--app", "wordcount", "--key-hex", "74ff"); out != "3\n" {
		t.Errorf("wordcount query --key-hex 74ff: %q, want 3", out)
	}
	if got := asked.take(); got != "wordcount-0000=1,wordcount-0001=1,wordcount-0002=1,wordcount-0003=1" {
		t.Errorf("wordcount key query asked %s, want every shard", got)
	}
	c.fails(1, `key "" (the empty key) not found in app wordcount (asked all 4 shard(s))`, "", "query", "--app", "wordcount", "--key", "")

	// Over HTTP: the member's own fan-out routes the same way; key= (bytes
	// percent-encoded), key_b64= URL-safe and standard all name one key.
	k := "k\xff\x00z"
	asked.take()
	for _, q := range []string{
		"key=" + url.QueryEscape(k),
		"key_b64=" + base64.RawURLEncoding.EncodeToString([]byte(k)),
		"key_b64=" + url.QueryEscape(base64.StdEncoding.EncodeToString([]byte(k))),
	} {
		var qr api.QueryResponse
		if code := httpJSON(t, base+"/v1/query?app=lastvalue&"+q, &qr); code != 200 {
			t.Fatalf("/v1/query?%s: %d", q, code)
		}
		key, err := api.DecodeBytes("key", qr.Key, qr.KeyB64)
		if err != nil || key != k || qr.Found == nil || !*qr.Found {
			t.Fatalf("/v1/query?%s: key %q (%v), found %v", q, key, err, qr.Found)
		}
		if v, err := api.DecodeBytes("value", qr.Value, qr.ValueB64); err != nil || v != kvs[k] || qr.Value != nil {
			t.Fatalf("/v1/query?%s: value %q (%v), want %q as value_b64", q, v, err, kvs[k])
		}
		if _, ok := qr.Shards[owner(k)]; len(qr.Shards) != 1 || !ok {
			t.Fatalf("/v1/query?%s answered from shards %v, want only %s", q, qr.Shards, owner(k))
		}
		if got := asked.take(); got != owner(k)+"=1" {
			t.Fatalf("/v1/query?%s asked %s, want only %s", q, got, owner(k))
		}
	}
	var big1 api.QueryResponse
	if code := httpJSON(t, base+"/v1/query?app=lastvalue&key=big", &big1); code != 200 {
		t.Fatalf("/v1/query key=big: %d", code)
	}
	if v, err := api.DecodeBytes("value", big1.Value, big1.ValueB64); err != nil || v != big {
		t.Fatalf("/v1/query key=big: %d bytes (%v), want %d", len(v), err, len(big))
	}
	var wc api.QueryResponse
	if code := httpJSON(t, base+"/v1/query?app=wordcount&key_b64=dP8", &wc); code != 200 {
		t.Fatalf("/v1/query wordcount key_b64=dP8: %d", code)
	}
	if v, err := api.DecodeBytes("value", wc.Value, wc.ValueB64); err != nil || v != "3" || len(wc.Shards) != 4 {
		t.Fatalf("wordcount fan-out over HTTP for t\xff: value %q (%v) from shards %v, want 3 from all 4", v, err, wc.Shards)
	}
	for q, want := range map[string]string{
		"key=a&key_b64=YQ":   "give one of key=K or key_b64=B, not both",
		"key_b64=!!":         "key_b64=!!: not base64",
		"key_b64= %2F8Aeg==": "%2B",
		"":                   "give exactly one of key=K, key_b64=B or all=1",
	} {
		var eb api.ErrorResponse
		if code := httpJSON(t, base+"/v1/query?app=lastvalue&"+strings.ReplaceAll(q, " ", "+"), &eb); code != 400 || !strings.Contains(eb.Error, want) {
			t.Errorf("/v1/query?%s: %d %q, want 400 saying %q", q, code, eb.Error, want)
		}
	}

	// A key whose partition no shard reads is an error naming it.
	specs := t.TempDir() + "/del.yaml"
	writeFile(t, specs, fmt.Sprintf("- {id: %s, delete: true}\n", owner("plain")))
	c.ok("", "shards", "apply", "-f", specs)
	c.fails(1, fmt.Sprintf(`key "plain" is placed in partition %d of topic kv, which no shard of app lastvalue reads`, topic.PartitionFor("plain", 4)),
		"", "query", "--app", "lastvalue", "--key", "plain")
}
