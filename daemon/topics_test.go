package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/blackhole"
	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
)

// harness runs client subcommands in-process against one etcd and one NATS.
type harness struct {
	t          *testing.T
	etcd, nats string
	// apps are the binary's apps (default: wordcount).
	apps []shard.App
}

func newCLI(t *testing.T) *harness {
	t.Helper()
	return &harness{t: t, etcd: strings.Join(etcdtest.StartServer(t), ","), nats: natstest.Start(t), apps: []shard.App{wordcount.App()}}
}

// run returns stdout, stderr and the exit code.
func (c *harness) run(stdin string, args ...string) (string, string, int) {
	var out bytes.Buffer
	errs, code := c.runTo(c.t.Context(), &out, stdin, args...)
	return out.String(), errs, code
}

// runTo runs with ctx, writing stdout to out; it returns stderr and the
// exit code.
func (c *harness) runTo(ctx context.Context, out io.Writer, stdin string, args ...string) (string, int) {
	var errb bytes.Buffer
	args = append(args, "--etcd.endpoints", c.etcd, "--wal.url", c.nats)
	code := Run(ctx, args, Options{Apps: c.apps, Stdin: strings.NewReader(stdin), Stdout: out, Stderr: &errb})
	return errb.String(), code
}

// ok runs and fails the test unless the command succeeds.
func (c *harness) ok(stdin string, args ...string) string {
	c.t.Helper()
	out, errs, code := c.run(stdin, args...)
	if code != 0 {
		c.t.Fatalf("%v: exit %d: %s%s", args, code, out, errs)
	}
	return out
}

// fails runs and fails the test unless the command exits with code, saying want.
func (c *harness) fails(code int, want, stdin string, args ...string) {
	c.t.Helper()
	out, errs, got := c.run(stdin, args...)
	if got != code || !strings.Contains(errs, want) {
		c.t.Fatalf("%v: exit %d, stderr %q (stdout %q); want exit %d saying %q", args, got, errs, out, code, want)
	}
}

func (c *harness) topics() map[string]api.TopicRow {
	c.t.Helper()
	var rows []api.TopicRow
	if err := json.Unmarshal([]byte(c.ok("", "topics", "list", "-o", "json")), &rows); err != nil {
		c.t.Fatal(err)
	}
	out := map[string]api.TopicRow{}
	for _, r := range rows {
		out[r.Name] = r
	}
	return out
}

func TestTopicsLifecycle(t *testing.T) {
	c := newCLI(t)
	if out := c.ok("", "topics", "create", "--name", "words", "--partitions", "3"); !strings.Contains(out, "created topic words with 3 partitions") {
		t.Fatalf("create: %q", out)
	}
	if out := c.ok("", "topics", "create", "--name", "words", "--partitions", "3"); !strings.Contains(out, "unchanged") {
		t.Fatalf("create again: %q", out)
	}
	c.fails(1, "topic words exists with 3 partitions; refusing 4", "", "topics", "create", "--name", "words", "--partitions", "4")
	c.fails(1, `topic "nope" does not exist (topics: words)`, "x\n", "publish", "--topic", "nope")

	// shards create: one shard per partition; --count must agree.
	c.fails(2, "--count: 2 must equal the partition count of words (3)", "", "shards", "create", "--app", "wordcount", "--count", "2")
	c.fails(1, `app wordcount publishes to topic counts: topic "counts" does not exist`, "", "shards", "create", "--app", "wordcount")
	c.ok("", "topics", "create", "--name", "counts", "--partitions", "3")
	if out := c.ok("", "shards", "create", "--app", "wordcount"); !strings.Contains(out, "created 3 shards: wordcount-0000 .. wordcount-0002") {
		t.Fatalf("shards create: %q", out)
	}

	// publish routes by the topic's count: every key lands in
	// PartitionFor(key, 3), whatever the shards.
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	want := make([]int64, 3)
	for _, k := range keys {
		want[topic.PartitionFor(k, 3)]++
	}
	c.ok(strings.Join(keys, "\n")+"\n", "publish", "--topic", "words")
	if got := c.topics()["words"]; fmt.Sprint(got.Messages) != fmt.Sprint(want) || len(got.Unread) != 0 {
		t.Fatalf("after publishing: %+v, want messages %v and nothing unread", got, want)
	}
	// Deleting a middle shard changes nothing about routing; the partition
	// it read is reported unread.
	specs := t.TempDir() + "/del.yaml"
	writeFile(t, specs, "- {id: wordcount-0001, delete: true}\n")
	c.ok("", "shards", "apply", "-f", specs)
	c.ok(strings.Join(keys, "\n")+"\n", "publish", "--topic", "words")
	for i := range want {
		want[i] *= 2
	}
	if got := c.topics()["words"]; fmt.Sprint(got.Messages) != fmt.Sprint(want) || fmt.Sprint(got.Unread) != "[1]" {
		t.Fatalf("after deleting wordcount-0001: %+v, want messages %v and partition 1 unread", got, want)
	}
	if _, errs, code := c.run("", "shards", "list"); code != 0 || !strings.Contains(errs, "WARNING: topic words: no shard reads partition(s) 1 of 3") {
		t.Fatalf("shards list: exit %d, stderr %q; want a warning about words/1", code, errs)
	}
	out := c.ok("", "topics", "list")
	if !regexp.MustCompile(`(?m)^words\s+3\s+16 \(\d+,\d+,\d+\)\s+1$`).MatchString(out) {
		t.Fatalf("topics list table:\n%s", out)
	}

	// delete: refused while shards read it, then with --force; the data goes too.
	c.fails(1, "topic words is read by 2 shard(s) (wordcount-0000, wordcount-0002)", "", "topics", "delete", "--name", "words")
	if out := c.ok("", "topics", "delete", "--name", "words", "--force"); !strings.Contains(out, "deleted topic words (3 partitions)") {
		t.Fatalf("delete --force: %q", out)
	}
	if _, ok := c.topics()["words"]; ok {
		t.Fatal("topic still listed after delete")
	}
	c.ok("", "topics", "create", "--name", "words", "--partitions", "2")
	if got := c.topics()["words"]; fmt.Sprint(got.Messages) != "[0 0]" {
		t.Fatalf("re-created topic: %+v, want empty partitions", got)
	}
	c.fails(1, `topic "gone" does not exist`, "", "topics", "delete", "--name", "gone")
}

func TestTopicRecordDamage(t *testing.T) {
	c := newCLI(t)
	cl := etcdtest.NewClient(t, strings.Split(c.etcd, ","))
	if _, err := cl.Put(t.Context(), "/consumerd/topics/junk", "junk"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(t.Context(), "/consumerd/topics/typo", `{"partition":4}`); err != nil {
		t.Fatal(err)
	}
	_, errs, code := c.run("", "topics", "list")
	if code != 0 || !strings.Contains(errs, "topic record /consumerd/topics/junk") || !strings.Contains(errs, `unknown field "partition"`) {
		t.Fatalf("topics list over damaged records: exit %d, stderr %q; want both named", code, errs)
	}
	c.fails(1, "topic record /consumerd/topics/typo", "x\n", "publish", "--topic", "typo")
}

func TestPublishFormats(t *testing.T) {
	c := newCLI(t)
	c.ok("", "topics", "create", "--name", "t", "--partitions", "4")
	count := func() int64 {
		var n int64
		for _, m := range c.topics()["t"].Messages {
			n += m
		}
		return n
	}
	c.ok("k1\tv1\nk2\tv2\n\n", "publish", "--topic", "t", "--format", "kv")
	c.fails(1, "line 2: no TAB between key and payload", "k1\tv1\nno tab here\n", "publish", "--topic", "t", "--format", "kv")
	c.ok(`{"user":"u1","n":1}`+"\n"+`{"user":7}`+"\n", "publish", "--topic", "t", "--format", "json", "--key-field", "user")
	c.fails(1, `line 2: no field "user" (--key-field)`, `{"user":"u1"}`+"\n"+`{"other":1}`+"\n", "publish", "--topic", "t", "--format", "json", "--key-field", "user")
	c.fails(1, "line 1: not a JSON object", "[1,2]\n", "publish", "--topic", "t", "--format", "json")
	c.fails(1, `line 1: field "key" is {"a":1}`, `{"key":{"a":1}}`+"\n", "publish", "--topic", "t", "--format", "json")
	// The failed runs stopped before their bad line: what came before is stored.
	if n := count(); n != 6 {
		t.Fatalf("%d messages stored, want 6", n)
	}

	// A line of nearly 1 MiB is its own key and fits; a larger one fails,
	// naming its line and the server's limit.
	big := strings.Repeat("x", 1<<20-512)
	c.ok(big+"\n", "publish", "--topic", "t")
	c.fails(1, "line 2: ", "ok\n"+strings.Repeat("y", 1<<20+1)+"\n", "publish", "--topic", "t")
	_, errs, _ := c.run("ok\n"+strings.Repeat("y", 1<<20+1)+"\n", "publish", "--topic", "t")
	if !strings.Contains(errs, "exceeds the NATS server's max_payload") {
		t.Fatalf("oversized line: %q, want the max_payload named", errs)
	}

	// --id makes the dedupe ids deterministic: re-running stores nothing twice.
	before := count()
	lines := "r1\nr2\nr3\n"
	c.ok(lines, "publish", "--topic", "t", "--id", "run-7")
	c.ok(lines, "publish", "--topic", "t", "--id", "run-7")
	if n := count(); n != before+3 {
		t.Fatalf("two runs with --id run-7: %d new messages, want 3", n-before)
	}
	c.ok(lines, "publish", "--topic", "t")
	if n := count(); n != before+6 {
		t.Fatalf("a run without --id: %d new messages, want 3 more", n-before-3)
	}
}

func TestPublishNATSDown(t *testing.T) {
	etcd := strings.Join(etcdtest.StartServer(t), ",")
	var out, errb bytes.Buffer
	args := []string{"topics", "create", "--name", "t", "--partitions", "1", "--etcd.endpoints", etcd}
	if code := Run(t.Context(), args, Options{Apps: []shard.App{wordcount.App()}, Stdout: &out, Stderr: &errb}); code != 0 {
		t.Fatalf("topics create: %d %s", code, errb.String())
	}
	dead := fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t))
	start := time.Now()
	errb.Reset()
	code := Run(t.Context(), []string{"publish", "--topic", "t", "--etcd.endpoints", etcd, "--wal.url", dead, "--timeout", "3s"},
		Options{Apps: []shard.App{wordcount.App()}, Stdin: strings.NewReader("a\n"), Stdout: &out, Stderr: &errb})
	if code != 1 || !strings.Contains(errb.String(), "cannot reach NATS JetStream at "+dead) || time.Since(start) > 4*time.Second {
		t.Fatalf("publish with NATS down: exit %d after %v, stderr %q; want exit 1 within --timeout naming the URL", code, time.Since(start), errb.String())
	}
}

// TestPublishSilentNATS: publish never outlives its --timeout, also when the
// nats-server it appends to goes silent mid-run (a partition: the connection
// stays open, no acknowledgement comes). The chaos harness found a publish
// still waiting for its acknowledgements' own 30 s timeout, past its
// --timeout, when one nats-server of a cluster was cut off.
func TestPublishSilentNATS(t *testing.T) {
	c := newCLI(t)
	c.ok("", "topics", "create", "--name", "t", "--partitions", "1")
	c.ok("a\n", "publish", "--topic", "t") // creates the stream
	hole := blackhole.New(t, strings.TrimPrefix(c.nats, "nats://"))
	stdin, lines := io.Pipe()
	const timeout = 6 * time.Second
	start := time.Now()
	done := make(chan struct{})
	var code int
	var errb bytes.Buffer
	go func() {
		defer close(done)
		code = Run(t.Context(), []string{"publish", "--topic", "t", "--timeout", timeout.String(), "--etcd.endpoints", c.etcd, "--wal.url", "nats://" + hole.Addr()},
			Options{Apps: c.apps, Stdin: stdin, Stdout: io.Discard, Stderr: &errb})
	}()
	if _, err := lines.Write([]byte("b\n")); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, timeout, "line b stored (the connection works)", func() (bool, string) {
		n := c.topics()["t"].Messages[0]
		return n >= 2, fmt.Sprintf("%d messages", n)
	})
	hole.Cut()
	_, _ = lines.Write([]byte("c\n"))
	_ = lines.Close()
	<-done
	if took := time.Since(start); code != 1 || took > timeout+3*time.Second || !strings.Contains(errb.String(), "--timeout "+timeout.String()+" passed") {
		t.Fatalf("publish to a silent server: exit %d after %s, stderr %q; want exit 1 naming --timeout within about %s", code, took, errb.String(), timeout)
	}
	hole.Heal()
}

func TestPartitionList(t *testing.T) {
	for in, want := range map[string]string{"": "", "0": "0", "0,1,2": "0-2", "0,2,3,4,7,9,10": "0,2-4,7,9-10"} {
		var ps []int
		for _, f := range strings.Split(in, ",") {
			if f != "" {
				var p int
				fmt.Sscan(f, &p)
				ps = append(ps, p)
			}
		}
		if got := cluster.PartitionList(ps); got != want {
			t.Errorf("partitionList(%s) = %q, want %q", in, got, want)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestEtcdRefusedFailsAtOnce: when nothing listens at any --etcd.endpoints
// address, a client command says so at once instead of waiting out
// --dial-timeout (an hour here: the test's context would end first).
func TestEtcdRefusedFailsAtOnce(t *testing.T) {
	dead := fmt.Sprintf("127.0.0.1:%d,http://127.0.0.1:%d", freeport.Port(t), freeport.Port(t))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a bound, not a measurement
	defer cancel()
	var out, errb bytes.Buffer
	code := Run(ctx, []string{"shards", "list", "--etcd.endpoints", dead, "--dial-timeout", "1h"},
		Options{Apps: []shard.App{wordcount.App()}, Stdout: &out, Stderr: &errb})
	if code != 1 || !strings.Contains(errb.String(), "cannot reach etcd at "+dead+": connection refused by ") || ctx.Err() != nil {
		t.Fatalf("shards list with etcd refused: exit %d, stderr %q, context %v; want exit 1 at once saying connection refused", code, errb.String(), ctx.Err())
	}
}
