package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/internal/waitfor"
)

// TestClustersApart runs two clusters, under the etcd prefixes /alpha and
// /beta, on ONE etcd and ONE nats-server, with the same member ids, each
// with its own wordcount shards (alpha: 2 with a hot standby each on 2
// members, beta: 3 on 1 member), and publishes a different corpus to topic
// "words" of each at the same time. Both must end with exactly their own
// corpus's counts and no FAILED replica, and the NATS server must hold
// exactly each cluster's streams in its namespace ("alpha_…", "beta_…",
// their snapshot buckets), each topic stream exactly its cluster's lines;
// deleting alpha's topic leaves beta's alone.
func TestClustersApart(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	base := newCluster(t, 3*time.Second)
	type side struct {
		ns      string
		c       *cluster
		shards  int
		members []*member
		lines   []string
		want    string
	}
	alphaLines, alphaCounts := corpus(3000)
	betaLines, betaCounts := otherCorpus(2000)
	sides := []*side{
		{ns: "alpha", c: base.sibling("alpha", "--etcd.prefix", "/alpha"), shards: 2, lines: alphaLines, want: renderCounts(alphaCounts)},
		{ns: "beta", c: base.sibling("beta", "--etcd.prefix", "/beta"), shards: 3, lines: betaLines, want: renderCounts(betaCounts)},
	}
	for _, s := range sides {
		s.c.mustRun(nil, "topics", "create", "--name", "words", "--partitions", fmt.Sprint(s.shards))
		s.c.mustRun(nil, "topics", "create", "--name", "counts", "--partitions", fmt.Sprint(s.shards))
	}
	sides[0].c.mustRun(nil, "shards", "create", "--app", "wordcount", "--count", "2", "--hot-standbys", "1")
	sides[1].c.mustRun(nil, "shards", "create", "--app", "wordcount", "--count", "3")
	sides[0].members = []*member{sides[0].c.addMember("m1", "zone-a"), sides[0].c.addMember("m2", "zone-b")}
	sides[1].members = []*member{sides[1].c.addMember("m1", "zone-a")}
	for _, s := range sides {
		for _, m := range s.members {
			s.c.start(m)
		}
	}
	// noneFailed fails the test at once when a replica of either cluster is
	// FAILED (what a cluster sharing the other's streams ends in).
	noneFailed := func(s *side, rows []shardRow) {
		for _, r := range rows {
			for _, rep := range r.Replicas {
				if rep.State == "FAILED" {
					t.Fatalf("cluster %s: shard %s replica on %s/%s is FAILED: %s", s.ns, r.ID, rep.Zone, rep.Member, rep.Error)
				}
			}
		}
	}
	for _, s := range sides {
		waitfor.Until(t, 45*time.Second, "cluster "+s.ns+": every shard PRIMARY", func() (bool, string) {
			rows, err := s.c.shards()
			if err != nil {
				return false, err.Error()
			}
			noneFailed(s, rows)
			return allPrimary(rows, s.shards, len(s.members))
		})
	}

	// Publish both corpora at once, in chunks.
	var wg sync.WaitGroup
	pubErr := make(chan error, len(sides))
	for _, s := range sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			const chunks = 4
			for i := 0; i < chunks; i++ {
				part := s.lines[i*len(s.lines)/chunks : (i+1)*len(s.lines)/chunks]
				if _, err := s.c.run([]byte(strings.Join(part, "\n")+"\n"), "publish", "--topic", "words"); err != nil {
					pubErr <- fmt.Errorf("cluster %s: %w", s.ns, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(pubErr)
	for err := range pubErr {
		t.Fatal(err)
	}

	for _, s := range sides {
		waitfor.Until(t, 45*time.Second, "cluster "+s.ns+": query --all equal to its corpus's counts", func() (bool, string) {
			rows, err := s.c.shards()
			if err != nil {
				return false, err.Error()
			}
			noneFailed(s, rows)
			out, err := s.c.run(nil, "query", "--app", "wordcount", "--all")
			if err != nil {
				return false, err.Error()
			}
			return out == s.want, diffCounts(out, s.want)
		})
	}
	for _, s := range sides {
		rows, err := s.c.shards()
		if err != nil {
			t.Fatal(err)
		}
		noneFailed(s, rows)
		if ok, why := allPrimary(rows, s.shards, len(s.members)); !ok {
			t.Fatalf("cluster %s at the end: %s", s.ns, why)
		}
	}

	// What is on the NATS server: each cluster's channels in its own
	// namespace, nothing in the default one, and every topic stream holds
	// exactly its cluster's lines.
	nc, err := nats.Connect(base.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs := map[string]uint64{}
	var got []string
	list := js.ListStreams(ctx)
	for info := range list.Info() {
		got = append(got, info.Config.Name)
		msgs[info.Config.Name] = info.State.Msgs
	}
	if err := list.Err(); err != nil {
		t.Fatalf("listing streams: %v", err)
	}
	sort.Strings(got)
	var want []string
	for _, s := range sides {
		want = append(want, "OBJ_"+s.ns+"-snapshots")
		for p := 0; p < s.shards; p++ {
			want = append(want,
				fmt.Sprintf("%s_words_s%04d", s.ns, p),
				fmt.Sprintf("%s_counts_s%04d", s.ns, p),
				fmt.Sprintf("%s_recovery_swordcount-%04d", s.ns, p))
		}
	}
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("streams on the NATS server:\n  %s\nwant:\n  %s", strings.Join(got, " "), strings.Join(want, " "))
	}
	for _, s := range sides {
		var words, logs uint64
		for p := 0; p < s.shards; p++ {
			words += msgs[fmt.Sprintf("%s_words_s%04d", s.ns, p)]
			logs += msgs[fmt.Sprintf("%s_recovery_swordcount-%04d", s.ns, p)]
		}
		if words != uint64(len(s.lines)) {
			t.Errorf("cluster %s: its words streams hold %d messages, want its %d lines", s.ns, words, len(s.lines))
		}
		if logs == 0 {
			t.Errorf("cluster %s: its recovery logs are empty", s.ns)
		}
		// consumerd itself counts the cluster's own messages (no nats CLI).
		if n := topicMessages(t, s.c, "words"); n != int64(len(s.lines)) {
			t.Errorf("cluster %s: topics list counts %d messages in words, want its %d lines", s.ns, n, len(s.lines))
		}
	}

	// Deleting alpha's topic removes alpha's streams only.
	sides[0].c.mustRun(nil, "topics", "delete", "--name", "words", "--force")
	for p := 0; p < sides[0].shards; p++ {
		if _, err := js.Stream(ctx, fmt.Sprintf("alpha_words_s%04d", p)); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("alpha_words_s%04d after alpha's topics delete: %v, want not found", p, err)
		}
	}
	if n := topicMessages(t, sides[1].c, "words"); n != int64(len(sides[1].lines)) {
		t.Errorf("cluster beta after alpha deleted its topic words: %d messages, want %d", n, len(sides[1].lines))
	}
}

// topicMessages is the number of messages `topics list -o json` counts in
// topic name of cluster c.
func topicMessages(t *testing.T, c *cluster, name string) int64 {
	t.Helper()
	out := c.mustRun(nil, "topics", "list", "-o", "json")
	var rows []struct {
		Name     string  `json:"name"`
		Messages []int64 `json:"messages"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("decoding topics list: %v: %q", err, out)
	}
	for _, r := range rows {
		if r.Name == name {
			var n int64
			for _, m := range r.Messages {
				n += m
			}
			return n
		}
	}
	t.Fatalf("topics list has no topic %s: %s", name, out)
	return 0
}

// otherCorpus is a corpus of n lines unlike corpus's: the same shape, its
// own vocabulary ("b-w000", ...), so a count that strays into the other
// cluster shows.
func otherCorpus(n int) (lines []string, counts map[string]int) {
	base, baseCounts := corpus(n)
	for _, l := range base {
		lines = append(lines, "b-"+strings.ReplaceAll(l, " ", " b-"))
	}
	counts = make(map[string]int, len(baseCounts))
	for tok, c := range baseCounts {
		counts["b-"+tok] = c
	}
	return lines, counts
}
