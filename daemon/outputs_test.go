package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// natsAdmin is an operator's JetStream connection to the harness's NATS.
func (c *harness) natsAdmin() njs.JetStream { return natstest.Admin(c.t, c.nats) }

// streamName is the stream of channel ch in the default namespace.
func (c *harness) streamName(ch string) string {
	c.t.Helper()
	name, err := jetstream.StreamName(jetstream.DefaultNamespace, ch)
	if err != nil {
		c.t.Fatal(err)
	}
	return name
}

// failedWith waits until shard id has a FAILED replica whose error holds
// every one of want, and returns that error.
func (c *harness) failedWith(id string, want ...string) string {
	c.t.Helper()
	var got string
	waitfor.Until(c.t, time.Minute, id+" FAILED saying "+strings.Join(want, " / "), func() (bool, string) {
		out := c.ok("", "shards", "list", "-o", "json")
		var rows []api.ShardRow
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			return false, err.Error()
		}
		for _, r := range rows {
			for _, rep := range r.Replicas {
				if r.ID != id || rep.State != "FAILED" {
					continue
				}
				got = rep.Error
				for _, w := range want {
					if !strings.Contains(rep.Error, w) {
						return false, out
					}
				}
				return true, ""
			}
		}
		return false, out
	})
	return got
}

// pendingOutputs is `shards outputs --shard id -o json`.
func (c *harness) pendingOutputs(id string) []shard.PendingOutput {
	c.t.Helper()
	var out []shard.PendingOutput
	if err := json.Unmarshal([]byte(c.ok("", "shards", "outputs", "--shard", id, "-o", "json")), &out); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// TestOutputOverStreamLimit is the item 4, as an operator meets
// it. wordcount publishes each token's count with the token as key. The
// operator lowers max_msg_size of the counts stream (NATS API) under a
// running primary: a committed output over it fails the shard — the reason
// names the shard, the topic and partition, the transaction, the server's
// refusal and the command — and a restart meets it again. 'shards outputs'
// lists it; --drop without --yes says what it would drop; with --yes the
// next primary drops it (counted), publishes the rest, and goes on. A later
// token over the limit is refused to the app when it stages it: nothing
// unpublishable is committed.
func TestOutputOverStreamLimit(t *testing.T) {
	c := newCLI(t)
	c.wordcountShards(1)
	base, _ := c.serveDir(t.TempDir())
	c.allPrimary(1)
	c.ok("alpha\n", "publish", "--topic", "words")
	counted := func(key, want string) {
		t.Helper()
		waitfor.Until(t, time.Minute, key+" counted "+want, func() (bool, string) {
			out, errs, _ := c.run("", "query", "--app", "wordcount", "--key", key)
			return out == want+"\n", out + errs
		})
	}
	counted("alpha", "1")

	js := c.natsAdmin()
	ctx := context.Background()
	st, err := js.Stream(ctx, c.streamName("counts/0000"))
	if err != nil {
		t.Fatalf("the counts stream after the first output: %v", err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxMsgSize = 300
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 400)
	c.ok("beta "+long+"\n", "publish", "--topic", "words")
	const id = "wordcount-0000"
	want := []string{"shard " + id, "topic counts partition 0", "txn 2", "max_msg_size of 300 bytes", "the server's reply",
		"consumerd shards outputs --shard " + id}
	c.failedWith(id, want...)
	c.ok("", "shards", "unassign", "--failed")
	c.failedWith(id, want[:3]...)

	pending := c.pendingOutputs(id)
	if len(pending) != 2 || pending[0].Txn != 2 || pending[1].Txn != 2 {
		t.Fatalf("pending outputs: %+v; want txn 2's two", pending)
	}
	i := slices.IndexFunc(pending, func(p shard.PendingOutput) bool { return p.Key == long })
	if i < 0 || pending[i].Topic != "counts" || pending[i].Partition != 0 || pending[i].Bytes != len(long)+1 {
		t.Fatalf("pending outputs: %+v; want the long token's, of %d bytes", pending, len(long)+1)
	}
	if out := c.ok("", "shards", "outputs", "--shard", id); !strings.Contains(out, pending[i].Ref()) || !strings.Contains(out, "OUTPUT") {
		t.Fatalf("shards outputs:\n%s", out)
	}
	ref := pending[i].Ref()
	c.fails(2, "--drop: \"2:x\": want TXN:INDEX", "", "shards", "outputs", "--shard", id, "--drop", "2:x")
	c.fails(2, "--yes: only with --drop", "", "shards", "outputs", "--shard", id, "--yes")
	c.fails(2, "has no such pending output", "", "shards", "outputs", "--shard", id, "--drop", "1:0", "--yes")
	c.fails(2, fmt.Sprintf("this drops 1 output of shard %s: %s (topic counts partition 0, %d bytes", id, ref, len(long)+1),
		"", "shards", "outputs", "--shard", id, "--drop", ref)
	if out := c.ok("", "shards", "outputs", "--shard", id, "--drop", ref, "--yes"); !strings.Contains(out, "1 replica(s) unassigned") {
		t.Fatalf("--drop --yes:\n%s", out)
	}
	c.allPrimary(1)
	waitfor.Until(t, time.Minute, "beta's count published", func() (bool, string) {
		out := c.ok("", "read", "--topic", "counts", "--partition", "0")
		return strings.Contains(out, "beta\t1\n"), out
	})
	for _, p := range c.pendingOutputs(id) {
		if p.Key == long {
			t.Fatalf("the dropped output is still pending: %+v", p)
		}
	}
	if body := httpGet(t, base+"/metrics"); !strings.Contains(body, `consumerd_shard_outputs_dropped_total{shard="`+id+`"} 1`) {
		t.Errorf("no consumerd_shard_outputs_dropped_total of 1 for %s in /metrics", id)
	}
	if out := c.ok("", "read", "--topic", "counts", "--partition", "0"); strings.Contains(out, long) {
		t.Fatalf("the dropped output was published:\n%s", out)
	}

	// A token over the limit now: refused when wordcount stages it.
	c.ok("gamma "+strings.Repeat("y", 400)+"\n", "publish", "--topic", "words")
	c.failedWith(id, "output counts/0000 can never take this message, so it is not staged", "max_msg_size of 300 bytes")
	for _, p := range c.pendingOutputs(id) {
		if strings.HasPrefix(p.Key, "yyy") {
			t.Fatalf("an output refused at stage time is pending: %+v", p)
		}
	}
}

// TestTopicsDeleteRefusesPublishers is the item 6. 'topics delete'
// refuses a topic a shard publishes to, naming the shard; with --force it
// deletes it, the shard fails saying its output topic is gone, and the
// topic's streams are not created again.
func TestTopicsDeleteRefusesPublishers(t *testing.T) {
	c := newCLI(t)
	c.wordcountShards(1)
	c.serveDir(t.TempDir())
	c.allPrimary(1)
	c.ok("alpha\n", "publish", "--topic", "words")
	waitfor.Until(t, time.Minute, "alpha counted", func() (bool, string) {
		out, errs, _ := c.run("", "query", "--app", "wordcount", "--key", "alpha")
		return out == "1\n", out + errs
	})
	c.fails(1, "topic counts is published to by 1 shard(s) (wordcount-0000); delete those shards first, or give --force", "",
		"topics", "delete", "--name", "counts")
	c.ok("", "topics", "delete", "--name", "counts", "--force")
	c.ok("beta\n", "publish", "--topic", "words")
	c.failedWith("wordcount-0000", "output topic counts (partition 0) of shard wordcount-0000", shard.ErrOutputTopicGone.Error(),
		"consumerd topics create --name counts", "consumerd shards outputs --shard wordcount-0000")
	c.ok("", "shards", "unassign", "--failed")
	c.failedWith("wordcount-0000", shard.ErrOutputTopicGone.Error())
	js := c.natsAdmin()
	names := js.StreamNames(context.Background())
	for n := range names.Name() {
		if n == c.streamName("counts/0000") {
			t.Fatalf("stream %s of the deleted topic counts was created again", n)
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
}
