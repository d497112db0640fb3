package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/internal/natsproc"
	"github.com/consumerd/consumerd/internal/waitfor"
)

// nats.go v1.55.0 (object store, reconnects): resetPendingAcksOnReconnect
// may start after the connection closed and then waits on a nil channel
// forever (third party; recoverylog/snapshot ignores it for the same reason).
func TestMain(m *testing.M) {
	natsproc.Main(m, goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
}

// corpus returns n deterministic lines of words (a fixed-seed PRNG over a
// skewed vocabulary), and the exact token counts they produce: the oracle.
func corpus(n int) (lines []string, counts map[string]int) {
	r := rand.New(rand.NewPCG(20261130, 7))
	vocab := make([]string, 400)
	for i := range vocab {
		vocab[i] = fmt.Sprintf("w%03d", i)
	}
	counts = map[string]int{}
	for i := 0; i < n; i++ {
		k := 1 + r.IntN(6)
		toks := make([]string, k)
		for j := range toks {
			// Skewed: low indexes are much more frequent.
			idx := int(float64(len(vocab)) * r.Float64() * r.Float64())
			toks[j] = vocab[idx]
			counts[toks[j]]++
		}
		lines = append(lines, strings.Join(toks, " "))
	}
	return lines, counts
}

func renderCounts(counts map[string]int) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %d\n", k, counts[k])
	}
	return b.String()
}

// diffCounts summarises how got differs from want (first few lines).
func diffCounts(got, want string) string {
	g := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(got), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			g[k] = v
		}
	}
	var diffs []string
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(want), "\n") {
		k, v, _ := strings.Cut(l, " ")
		seen[k] = true
		if g[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: got %q want %s", k, g[k], v))
		}
	}
	for k, v := range g {
		if !seen[k] {
			diffs = append(diffs, fmt.Sprintf("%s: got %s, want absent", k, v))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 10 {
		diffs = append(diffs[:10], fmt.Sprintf("... %d more", len(diffs)-10))
	}
	return fmt.Sprintf("%d keys differ: %s", len(diffs), strings.Join(diffs, "; "))
}

// checkTokens reads the whole tokens topic and checks it holds every token
// occurrence of the corpus exactly once: per token as many messages as
// occurrences, no more (a duplicate) and no fewer (a loss).
func checkTokens(t *testing.T, c *cluster, counts map[string]int) {
	t.Helper()
	out := c.mustRun(nil, "read", "--topic", "tokens", "-o", "json")
	got := map[string]int{}
	total := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m struct {
			Key string `json:"key"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("read -o json: %q: %v", line, err)
		}
		got[m.Key]++
		total++
	}
	want := 0
	for _, n := range counts {
		want += n
	}
	if g, w := renderCounts(got), renderCounts(counts); total != want || g != w {
		t.Fatalf("tokens topic holds %d messages for %d token occurrences: %s", total, want, diffCounts(g, w))
	}
}

// primariesOf returns the members holding slot 0 of some shard, most first.
func primariesOf(as []assignment) []string {
	n := map[string]int{}
	for _, a := range as {
		if a.slot == 0 {
			n[a.member]++
		}
	}
	out := make([]string, 0, len(n))
	for m := range n {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool {
		if n[out[i]] != n[out[j]] {
			return n[out[i]] > n[out[j]]
		}
		return out[i] < out[j]
	})
	return out
}

// TestFaults runs three members in two zones against a real etcd and a real
// nats-server, publishes a known corpus while members are killed (SIGKILL),
// restarted, frozen past their lease (SIGSTOP, a zombie primary) and drained
// (SIGTERM), and checks that the word counts equal the corpus exactly: every
// message changed the state exactly once. The same corpus also flows through
// the two-stage pipeline (lines -> split -> tokens -> tally): the tokens topic
// must hold every token occurrence exactly once (outputs are exactly once,
// zombies included) and tally must equal the corpus.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process fault test skipped in -short mode")
	}
	const (
		leaseTTL = 2 * time.Second
		nShards  = 4
		nLines   = 20000
		nChunks  = 100
	)
	c := newCluster(t, leaseTTL)
	c.mustRun(nil, "topics", "create", "--name", "words", "--partitions", fmt.Sprint(nShards))
	c.mustRun(nil, "topics", "create", "--name", "counts", "--partitions", fmt.Sprint(nShards))
	c.mustRun(nil, "shards", "create", "--app", "wordcount", "--hot-standbys", "1")
	for _, tp := range []string{"lines", "tokens", "totals"} {
		c.mustRun(nil, "topics", "create", "--name", tp, "--partitions", fmt.Sprint(nShards))
	}
	c.mustRun(nil, "shards", "create", "--app", "split", "--hot-standbys", "1")
	c.mustRun(nil, "shards", "create", "--app", "tally", "--hot-standbys", "1")
	const allShards = 3 * nShards

	members := []*member{c.addMember("m1", "zone-a"), c.addMember("m2", "zone-b"), c.addMember("m3", "zone-a")}
	byID := map[string]*member{}
	for _, m := range members {
		byID[m.id] = m
		c.start(m)
	}
	waitfor.Until(t, 60*time.Second, "all shards PRIMARY with a hot standby", func() (bool, string) {
		rows, err := c.shards()
		if err != nil {
			return false, err.Error()
		}
		return allPrimary(rows, allShards, 2)
	})

	lines, counts := corpus(nLines)
	want := renderCounts(counts)

	primaries := func() []string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		as, err := c.assignments(ctx)
		if err != nil {
			t.Fatalf("reading assignments: %v", err)
		}
		return primariesOf(as)
	}
	var published atomic.Int64 // lines acknowledged by the background publisher
	memberLease := func(m *member) int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := c.client.Get(ctx, "/consumerd/members/"+m.zone+"/"+m.id)
		if err != nil {
			t.Fatalf("reading member key of %s: %v", m.id, err)
		}
		if len(resp.Kvs) == 0 {
			return 0
		}
		return resp.Kvs[0].Lease
	}
	killRestart := func(ids ...string) {
		old := map[string]int64{}
		for _, id := range ids {
			old[id] = memberLease(byID[id])
			t.Logf("SIGKILL %s (%d lines published)", id, published.Load())
			byID[id].proc.kill()
		}
		for _, id := range ids {
			c.start(byID[id]) // restarts at once: it waits out its old lease
		}
		// Until the old lease expires, the dead incarnation's keys (PRIMARY
		// included) are still in etcd: wait for the new one to announce.
		for _, id := range ids {
			waitfor.Until(t, 60*time.Second, id+" to rejoin under a new lease", func() (bool, string) {
				l := memberLease(byID[id])
				return l != 0 && l != old[id], fmt.Sprintf("lease %x, old %x", l, old[id])
			})
		}
	}
	// Publish in small chunks from a background goroutine, so messages keep
	// flowing while the faults below happen. The corpus is cut into one
	// segment per fault plus one; segment k+1 is published only once fault k
	// has started, so every fault strikes while publishing is under way.
	const nFaults = 6
	segment := nChunks / (nFaults + 1)
	faultStarted := make([]chan struct{}, nFaults)
	for i := range faultStarted {
		faultStarted[i] = make(chan struct{})
	}
	stopPublishing := make(chan struct{})
	defer close(stopPublishing)
	pubDone := make(chan error, 1)
	go func() {
		chunk := nLines / nChunks
		for i := 0; i < nChunks; i++ {
			if k := i/segment - 1; i%segment == 0 && k >= 0 && k < nFaults {
				select {
				case <-faultStarted[k]:
				case <-stopPublishing:
					pubDone <- fmt.Errorf("publishing stopped at chunk %d", i)
					return
				}
			}
			data := []byte(strings.Join(lines[i*chunk:(i+1)*chunk], "\n") + "\n")
			for _, tp := range []string{"words", "lines"} {
				// Deterministic dedupe ids: a retried chunk stores nothing twice.
				if _, err := c.run(data, "publish", "--topic", tp, "--id", fmt.Sprintf("chunk-%d", i)); err != nil {
					pubDone <- fmt.Errorf("publishing chunk %d to %s: %w", i, tp, err)
					return
				}
			}
			published.Add(int64(chunk))
		}
		pubDone <- nil
	}()
	// everyShardHasPrimary waits until every shard has a PRIMARY again.
	everyShardHasPrimary := func() {
		waitfor.Until(t, 60*time.Second, "every shard PRIMARY", func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			as, err := c.assignments(ctx)
			if err != nil {
				return false, err.Error()
			}
			n := 0
			for _, a := range as {
				if a.slot == 0 && a.state == "PRIMARY" {
					n++
				}
			}
			return n == allShards, fmt.Sprintf("%d of %d shards PRIMARY", n, allShards)
		})
	}
	zombie := func() {
		id := primaries()[0]
		m := byID[id]
		t.Logf("SIGSTOP %s (lease %s): a zombie primary (%d lines published)", id, leaseTTL, published.Load())
		m.proc.signal(syscall.SIGSTOP)
		// Frozen past its lease: its shards move to their standbys.
		waitfor.Until(t, 30*time.Second, "the frozen member's primaries to move", func() (bool, string) {
			for _, x := range primaries() {
				if x == id {
					return false, id + " still holds a primary"
				}
			}
			return true, ""
		})
		m.proc.signal(syscall.SIGCONT)
		t.Logf("SIGCONT %s (%d lines published)", id, published.Load())
	}
	faults := []func(){
		func() { killRestart(primaries()[0]) },
		zombie,
		func() { killRestart("m2") },
		func() { killRestart("m1", "m3") }, // both zone-a members at once: a shard loses both replicas
		func() { killRestart(primaries()[0]) },
		zombie,
	}
	if len(faults) != nFaults {
		t.Fatalf("%d faults, want nFaults=%d", len(faults), nFaults)
	}
	for i, f := range faults {
		// Fault i strikes once segment i is published; segment i+1 follows
		// while it is under way.
		target := int64((i + 1) * segment * (nLines / nChunks))
		waitfor.Until(t, 60*time.Second, "publishing to progress", func() (bool, string) {
			return published.Load() >= target, fmt.Sprintf("%d of %d lines published", published.Load(), target)
		})
		close(faultStarted[i])
		f()
		everyShardHasPrimary()
	}
	if err := <-pubDone; err != nil {
		t.Fatal(err)
	}

	got := ""
	waitfor.Until(t, 120*time.Second, "every shard PRIMARY and the counts equal to the corpus", func() (bool, string) {
		rows, err := c.shards()
		if err != nil {
			return false, err.Error()
		}
		if ok, why := allPrimary(rows, allShards, 1); !ok {
			return false, why
		}
		for _, app := range []string{"wordcount", "tally"} {
			out, err := c.run(nil, "query", "--app", app, "--all")
			if err != nil {
				return false, err.Error()
			}
			got = out
			if got != want {
				return false, app + ": " + diffCounts(got, want)
			}
		}
		return true, ""
	})
	checkTokens(t, c, counts)
	// Consumed to the end: the primaries report no lag (they refresh it
	// about every second, so poll).
	waitfor.Until(t, 15*time.Second, "zero lag on every source", func() (bool, string) {
		rows, err := c.shards()
		if err != nil {
			return false, err.Error()
		}
		for _, r := range rows {
			if len(r.Lag) == 0 {
				return false, "shard " + r.ID + " reports no lag yet"
			}
			for ch, lag := range r.Lag {
				if lag != 0 {
					return false, fmt.Sprintf("shard %s: lag %d on %s", r.ID, lag, ch)
				}
			}
		}
		return true, ""
	})
	if out := c.mustRun(nil, "query", "--app", "wordcount", "--all"); out != want {
		t.Fatalf("counts changed after matching the corpus: %s", diffCounts(out, want))
	}
	for _, m := range members {
		if m.proc.exited() {
			t.Errorf("member %s exited: %v", m.id, m.proc.err)
		}
	}
	if v := strings.TrimSpace(c.mustRun(nil, "query", "--app", "wordcount", "--key", "w000")); v != fmt.Sprint(counts["w000"]) {
		t.Fatalf("query --key w000 = %q, want %d", v, counts["w000"])
	}
	// /v1/query on a member that is not the shard's primary forwards once to
	// the primary; a request that was already forwarded is not forwarded again.
	// A member just resumed from SIGSTOP rejoins with a new session first.
	for _, m := range members {
		waitfor.Until(t, 30*time.Second, m.id+" to have a live session", func() (bool, string) {
			code, body, err := httpGet("http://" + m.httpAddr + "/v1/status")
			return err == nil && code == 200 && strings.Contains(string(body), `"session": true`), fmt.Sprintf("%d %s %v", code, body, err)
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	as, err := c.assignments(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	var shard0, primary0 string
	for _, a := range as {
		if a.slot == 0 && strings.HasPrefix(a.shard, "wordcount-") {
			shard0, primary0 = a.shard, a.member
			break
		}
	}
	for _, m := range members {
		if m.id == primary0 {
			continue
		}
		u := "http://" + m.httpAddr + "/v1/query?app=wordcount&all=1&shard=" + shard0
		code, body, err := httpGet(u)
		if err != nil || code != 200 || !strings.Contains(string(body), `"`+shard0+`"`) {
			t.Fatalf("forwarded query via %s: %d %q %v", m.id, code, body, err)
		}
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set("Consumerd-Forwarded", "test")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Fatalf("already-forwarded query via %s: status %d, want 421", m.id, resp.StatusCode)
		}
		break
	}

	// SIGTERM drains a member make-before-break: it exits 0 once its shards
	// moved, and nothing is lost or counted twice.
	m3 := byID["m3"]
	t.Logf("SIGTERM m3")
	m3.proc.signal(syscall.SIGTERM)
	select {
	case <-m3.proc.done:
	case <-time.After(40 * time.Second):
		t.Fatalf("m3 did not exit within 40s of SIGTERM")
	}
	if m3.proc.err != nil {
		t.Fatalf("m3 exited with %v after SIGTERM, want 0", m3.proc.err)
	}
	everyShardHasPrimary()
	for _, app := range []string{"wordcount", "tally"} {
		if out := c.mustRun(nil, "query", "--app", app, "--all"); out != want {
			t.Fatalf("%s counts changed by the drain: %s", app, diffCounts(out, want))
		}
	}
	checkTokens(t, c, counts)
	c.start(m3)

	// The zombies rejoined under new leases: three live members.
	waitfor.Until(t, 30*time.Second, "three members in `members list`", func() (bool, string) {
		out, err := c.run(nil, "members", "list", "-o", "json")
		if err != nil {
			return false, err.Error()
		}
		var ms []struct{ ID string }
		if err := json.Unmarshal([]byte(out), &ms); err != nil {
			return false, err.Error()
		}
		return len(ms) == 3, out
	})
	// And after all of it, still exactly the corpus.
	waitfor.Until(t, 60*time.Second, "the counts to equal the corpus at the end", func() (bool, string) {
		for _, app := range []string{"wordcount", "tally"} {
			out, err := c.run(nil, "query", "--app", app, "--all")
			if err != nil {
				return false, err.Error()
			}
			if out != want {
				return false, app + ": " + diffCounts(out, want)
			}
		}
		return true, ""
	})
	checkTokens(t, c, counts)
}
