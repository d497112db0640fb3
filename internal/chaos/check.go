package chaos

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/consumerd/consumerd/examples/pipeline"
)

// The checker: what the run's published lines must have produced, compared
// with what the cluster shows through its own client commands.

// maxListed bounds the keys an anomaly lists.
const maxListed = 8

// diffCounts lists every key whose count in got differs from want (absent
// counts as 0), sorted, at most maxListed of them plus how many more; what
// names what got is (e.g. "tally", "tokens").
func diffCounts(what string, want, got map[string]int64) []string {
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	var bad []string
	for k := range keys {
		if want[k] != got[k] {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	var out []string
	for i, k := range bad {
		if i == maxListed {
			out = append(out, fmt.Sprintf("%s: and %d more keys differ", what, len(bad)-maxListed))
			break
		}
		out = append(out, fmt.Sprintf("%s: %q is %d, want %d", what, k, got[k], want[k]))
	}
	return out
}

// parseQueryAll reads `query --all` output: "key value" per line.
func parseQueryAll(out []byte) (map[string]int64, error) {
	got := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("query --all: bad line %q", sc.Text())
		}
		got[k] = n
	}
	return got, sc.Err()
}

// parseTopic reads `read -o lines` output, "key<TAB>payload" per line,
// into the number of messages per key and the last payload per key (a key
// lives in one partition, read in order, so its last line is its newest).
func parseTopic(out []byte) (count map[string]int64, last map[string]string, err error) {
	count, last = map[string]int64{}, map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "\t")
		if !ok {
			return nil, nil, fmt.Errorf("read: bad line %q", sc.Text())
		}
		count[k]++
		last[k] = v
	}
	return count, last, sc.Err()
}

// diffLast lists the keys whose last totals message is not their count.
func diffLast(want map[string]int64, last map[string]string) []string {
	got := map[string]int64{}
	for k, v := range last {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			n = -1
		}
		got[k] = n
	}
	return diffCounts("totals (last per token)", want, got)
}

// shardProblems lists what is wrong with the shards and members once all
// faults are healed: a shard not PRIMARY, a replica neither PRIMARY nor
// STANDBY (wedged in BACKFILL, FAILED), a started member missing from etcd.
func shardProblems(rows []shardRow, members []memberRow, wantMembers []string) []string {
	var out []string
	if len(rows) == 0 {
		out = append(out, "no shards listed")
	}
	for _, r := range rows {
		if r.Status != "PRIMARY" {
			out = append(out, fmt.Sprintf("shard %s is %s %s", r.ID, r.Status, r.Error))
		}
		for _, rep := range r.Replicas {
			if rep.State != "PRIMARY" && rep.State != "STANDBY" {
				out = append(out, fmt.Sprintf("shard %s replica on %s is %s %s", r.ID, rep.Member, rep.State, rep.Error))
			}
		}
	}
	have := map[string]bool{}
	for _, m := range members {
		have[m.ID] = true
	}
	for _, id := range wantMembers {
		if !have[id] {
			out = append(out, fmt.Sprintf("member %s is not registered in etcd", id))
		}
	}
	return out
}

// talliesExact is one poll of the pipeline's end state: nil when tally's
// counts, gathered from every shard primary, equal the model of lines.
func (c *cluster) talliesExact(ctx context.Context, want map[string]int64) []string {
	out, err := c.client(ctx, 20*time.Second, nil, "query", "--app", pipeline.TallyName, "--all")
	if err != nil {
		return []string{err.Error()}
	}
	got, err := parseQueryAll(out)
	if err != nil {
		return []string{err.Error()}
	}
	return diffCounts("tally", want, got)
}

// topicsExact checks the tokens topic (one message per token occurrence,
// none lost, none doubled) and the totals topic (each token's last message
// its count).
func (c *cluster) topicsExact(ctx context.Context, want map[string]int64) []string {
	var out []string
	tokens, err := c.client(ctx, 60*time.Second, nil, "read", "--topic", pipeline.Tokens)
	if err != nil {
		return []string{err.Error()}
	}
	count, _, err := parseTopic(tokens)
	if err != nil {
		return []string{err.Error()}
	}
	out = append(out, diffCounts("tokens topic (messages per token)", want, count)...)
	totals, err := c.client(ctx, 60*time.Second, nil, "read", "--topic", pipeline.Totals)
	if err != nil {
		return append(out, err.Error())
	}
	_, last, err := parseTopic(totals)
	if err != nil {
		return append(out, err.Error())
	}
	return append(out, diffLast(want, last)...)
}

// healthy is one poll of the shards and members: nil when every shard is
// PRIMARY with its standbys caught up and every member is registered.
func (c *cluster) healthy(ctx context.Context) []string {
	rows, err := c.shards(ctx)
	if err != nil {
		return []string{err.Error()}
	}
	ms, err := c.memberList(ctx)
	if err != nil {
		return []string{err.Error()}
	}
	var want []string
	for _, m := range c.members {
		want = append(want, m.name)
	}
	return shardProblems(rows, ms, want)
}

// model is the pipeline's expected counts after lines.
func model(lines []string) map[string]int64 { return pipeline.Count(lines) }
