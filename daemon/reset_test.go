package daemon

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/internal/natsconn"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/wal"
)

// TestShardsResetAfterLostLog: the WAL loses a shard's recovery log while
// the member is down (as when the NATS store is deleted) and its local
// database survives. The shard does not sit in STANDBY forever: it is FAILED
// with the reason and the choices, and 'shards reset --yes' rebuilds it from
// what the log has (nothing: so it re-reads its partition), exactly.
func TestShardsResetAfterLostLog(t *testing.T) {
	c := newCLI(t)
	c.wordcountShards(2)
	dir := t.TempDir()
	_, stop := c.serveDir(dir)
	c.allPrimary(2)
	c.ok(strings.Repeat("the end\nthe start\n", 15), "publish", "--topic", "words")
	counted := func(what string) {
		waitfor.Until(t, time.Minute, what, func() (bool, string) {
			out, errs, _ := c.run("", "query", "--app", "wordcount", "--key", "the")
			return out == "30\n", out + errs
		})
	}
	counted("every line counted")
	stop()

	op, err := connect.OpenWAL(c.nats, "consumerd", 1, 5*time.Second, natsconn.Security{}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	err = op.(wal.ChannelRemover).RemoveChannel(t.Context(), recoverylog.Channel("wordcount-0000"))
	op.Close()
	if err != nil {
		t.Fatal(err)
	}

	c.serveDir(dir)
	waitfor.Until(t, time.Minute, "wordcount-0000 FAILED, saying why and what to do", func() (bool, string) {
		out := c.ok("", "shards", "list", "-o", "json")
		var rows []api.ShardRow
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			return false, err.Error()
		}
		for _, r := range rows {
			if r.ID == "wordcount-0000" && r.Status == "FAILED" && len(r.Replicas) == 1 {
				e := r.Replicas[0].Error
				return strings.Contains(e, "recovery log is behind the local database") && strings.Contains(e, "shards reset --shard wordcount-0000"), e
			}
		}
		return false, out
	})
	c.fails(2, "give exactly one of --shard ID or --lost-log", "", "shards", "reset", "--yes")
	c.fails(2, "reset rebuilds 1 shard(s) (wordcount-0000) from what their recovery logs have", "", "shards", "reset", "--lost-log")
	c.fails(1, `no shard "nope"`, "", "shards", "reset", "--shard", "nope", "--yes")
	if out := c.ok("", "shards", "reset", "--lost-log", "--yes"); !strings.HasPrefix(out, "reset wordcount-0000: ") || strings.Count(out, "\n") != 1 ||
		!strings.Contains(out, "1 replica(s) unassigned") {
		t.Fatalf("shards reset --lost-log: %q; want wordcount-0000 alone reset", out)
	}
	counted("the exact count after the reset")
	if st, out := c.statuses(); st["wordcount-0000"] != "PRIMARY" || st["wordcount-0001"] != "PRIMARY" {
		t.Fatalf("after the reset: %s", out)
	}
}
