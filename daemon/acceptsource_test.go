package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/shard"
)

// TestAcceptSourceAfterStreamsRecreated is the run: 50 lines
// published to words, the four words streams deleted with the NATS API, 20
// more lines published. Every wordcount shard goes FAILED saying which
// source lost what and how to accept it (shards list, the status page, the
// metric), again after a restart, instead of staying PRIMARY with lag 0
// and never counting the new lines; `shards accept-source --lost-source
// --from start` has them count the new lines, once.
func TestAcceptSourceAfterStreamsRecreated(t *testing.T) {
	c := newCLI(t)
	c.wordcountShards(4)
	base, _ := c.serveDir(t.TempDir())
	c.allPrimary(4)
	var first, more strings.Builder
	for i := range 50 {
		fmt.Fprintf(&first, "alpha %d\n", i)
	}
	for i := range 20 {
		fmt.Fprintf(&more, "alpha again %d\n", i)
	}
	c.ok(first.String(), "publish", "--topic", "words")
	counted := func(want string) {
		t.Helper()
		waitfor.Until(t, time.Minute, "alpha counted "+want+" times", func() (bool, string) {
			out, errs, _ := c.run("", "query", "--app", "wordcount", "--key", "alpha")
			return out == want+"\n", out + errs
		})
	}
	counted("50")

	js := c.natsAdmin()
	for p := range 4 {
		if err := js.DeleteStream(context.Background(), c.streamName(fmt.Sprintf("words/%04d", p))); err != nil {
			t.Fatal(err)
		}
	}
	c.ok(more.String(), "publish", "--topic", "words")
	allLost := func(what, reason string) {
		t.Helper()
		waitfor.Until(t, time.Minute, what, func() (bool, string) {
			out := c.ok("", "shards", "list", "-o", "json")
			var rows []api.ShardRow
			if err := json.Unmarshal([]byte(out), &rows); err != nil {
				return false, err.Error()
			}
			lost := 0
			for _, r := range rows {
				if r.Status == "FAILED" && len(r.Replicas) == 1 {
					e := r.Replicas[0].Error
					if strings.Contains(e, shard.ErrSourceLost.Error()) && strings.Contains(e, reason) &&
						strings.Contains(e, "shards accept-source --shard "+r.ID+" --topic words") {
						lost++
					}
				}
			}
			return lost == 4, out
		})
	}
	allLost("every shard FAILED for its lost source", "removed")
	if body := httpGet(t, base+"/"); !strings.Contains(body, shard.ErrSourceLost.Error()) {
		t.Errorf("the status page does not show the loss:\n%.2000s", body)
	}
	if body := httpGet(t, base+"/metrics"); !strings.Contains(body, `consumerd_shard_source_lost_total{channel="words/0000",shard="wordcount-0000"} 1`) {
		t.Errorf("no consumerd_shard_source_lost_total for wordcount-0000 in /metrics")
	}

	// A restart finds the loss again, from the offsets in the state.
	c.ok("", "shards", "unassign", "--failed")
	allLost("every shard FAILED again after a restart", "created again")

	c.fails(2, "give exactly one of --shard ID or --lost-source", "", "shards", "accept-source", "--from", "start", "--yes")
	c.fails(2, "--from: want start or end", "", "shards", "accept-source", "--lost-source", "--yes")
	c.fails(2, "accept-source has 4 sources read on from the start of what its channel holds now", "", "shards", "accept-source", "--lost-source", "--from", "start")
	out := c.ok("", "shards", "accept-source", "--lost-source", "--from", "start", "--yes")
	if strings.Count(out, "reads after id 0 (from start)") != 4 || strings.Count(out, "1 replica(s) unassigned") != 4 {
		t.Fatalf("accept-source --lost-source:\n%s", out)
	}
	counted("70")
	c.allPrimary(4)
}

func httpGet(t *testing.T, u string) string {
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
	return string(b)
}
