package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/internal/benchround"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/topic"
)

// The workload of BenchmarkPlacementSkew: skewShards wordcount shards (one
// partition of "words" each) with a hot standby, on skewMembers members in
// zones of their own; skewHot of the shards get skewHotShare of the
// skewRate lines a second, the others share the rest.
const (
	skewMembers  = 3
	skewShards   = 30
	skewHot      = 3 // 10% of the shards
	skewHotShare = 9 // tenths of the lines that go to the hot shards
	// skewRate: on a 2-core machine the members' CPU hardly grows with
	// the rate (2,000 to 8,000 lines/s measured about the same), as if
	// per-transaction costs dominated: with min_txn_duration 0 a faster
	// source can make bigger transactions rather than more, and a wordcount
	// transaction's outputs are bounded by the corpus's 400 words. The hot primaries report 0.1-0.3 cores of busy
	// time together at this rate and nats-server takes 0.7-1 core, so a
	// higher one only crowds the machine.
	skewRate = 4000
	// skewWindow is how long each member's CPU time is measured.
	skewWindow = 10 * time.Second
	// skewLoadInterval is --member.load-interval in both modes: both run
	// the same reporting work, only the leader's use of it differs.
	skewLoadInterval = time.Second
)

// BenchmarkPlacementSkew measures how evenly the members of a cluster share
// the CPU when a tenth of the shards carry nine tenths of the input, with
// the leader placing primaries by load (--placement load) and, as the
// baseline, by count only (--placement count). Each round runs both modes,
// count first, each on a fresh cluster (etcd, nats-server, 3 members) with
// the same workload, and measures every member process's CPU time
// (utime+stime) over skewWindow; its figure is the busiest member's CPU
// over the mean member's. It prints
//
//	BENCH placement.skew members=3 shards=30 hot=10% rounds=N max_over_mean=X count_max_over_mean=Y min=… max=… count_min=… count_max=…
//
// with the medians over the rounds (3 by default; CONSUMERD_BENCH_ROUNDS
// overrides) and their spread. The publisher (this process), etcd and
// nats-server are not counted. The goal is max_over_mean <= 1.3 under
// load placement, with the count baseline clearly higher. Each mode's log
// line gives every member's cores, what the uncounted processes used,
// the hand-overs for load during the window (not a failure: their cost is
// part of load placement's figure) and the load reports. The whole
// measurement runs once, whatever b.N is.
func BenchmarkPlacementSkew(b *testing.B) {
	b.ResetTimer()
	res := benchround.Collect(b, 3, func(r int) []benchround.Figure {
		count := skewRound(b, "count")
		load := skewRound(b, "load")
		return []benchround.Figure{
			benchround.F("max_over_mean", load, 2),
			benchround.F("count_max_over_mean", count, 2),
		}
	})
	b.StopTimer()
	fmt.Printf("BENCH placement.skew members=%d shards=%d hot=%d%% rounds=%d max_over_mean=%.2f count_max_over_mean=%.2f min=%.2f max=%.2f count_min=%.2f count_max=%.2f\n",
		skewMembers, skewShards, 100*skewHot/skewShards, res.Rounds(),
		res.Median("max_over_mean"), res.Median("count_max_over_mean"),
		res.Min("max_over_mean"), res.Max("max_over_mean"),
		res.Min("count_max_over_mean"), res.Max("count_max_over_mean"))
}

// skewRound runs the workload on a fresh cluster whose leader places
// primaries by mode ("count" or "load") and returns the busiest member's
// CPU over the mean. Everything it starts (members, etcd, nats-server, the
// publisher) is stopped when it returns.
func skewRound(b *testing.B, mode string) float64 {
	s := benchround.NewScope(b)
	defer s.Close()
	c := newCluster(s, 5*time.Second)
	c.mustRun(nil, "topics", "create", "--name", "words", "--partitions", fmt.Sprint(skewShards))
	c.mustRun(nil, "topics", "create", "--name", "counts", "--partitions", fmt.Sprint(skewShards))

	// Every member registered before the shards exist: the first placement
	// spreads the primaries by count, 10 a member, in both modes.
	// c.flags goes to client subcommands too, which know neither flag: set
	// only while the members start.
	c.flags = []string{"--placement", mode, "--member.load-interval", skewLoadInterval.String()}
	var members []*member
	for i, zone := range []string{"zone-a", "zone-b", "zone-c"} {
		m := c.addMember(fmt.Sprintf("m%d", i+1), zone)
		c.start(m)
		members = append(members, m)
	}
	c.flags = nil
	waitfor.Until(s, 60*time.Second, "every member to register", func() (bool, string) {
		for _, m := range members {
			if m.proc.exited() {
				s.Fatalf("member %s exited: %v\n%s", m.id, m.proc.err, m.proc.tail(20))
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := c.client.Get(ctx, "/consumerd/members/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return false, err.Error()
		}
		return resp.Count == skewMembers, fmt.Sprintf("%d of %d members registered", resp.Count, skewMembers)
	})
	var specs strings.Builder
	for i := range skewShards {
		fmt.Fprintf(&specs, "- {id: wordcount-%04d, app: wordcount, sources: [{topic: words, partition: %d}], hot_standbys: 1}\n", i, i)
	}
	specFile := filepath.Join(c.dir, "specs.yaml")
	if err := os.WriteFile(specFile, []byte(specs.String()), 0o644); err != nil {
		s.Fatal(err)
	}
	c.mustRun(nil, "shards", "apply", "-f", specFile)
	as := waitSettled(s, c, skewMembers, skewShards)

	hot, hotPart := pickHot(s, as)
	s.Logf("%s: hot shards %v, primaries on %s, standbys on %v", mode, hot, primaryMember(as, hot[0]), standbysOf(as, hot))
	cold := []int{}
	for p := range skewShards {
		if !slices.Contains(hotPart, p) {
			cold = append(cold, p)
		}
	}
	load := startSkewLoad(s, c, hotPart, cold, skewRate)
	loadStart := time.Now()

	ready := loadStart
	if mode == "load" {
		// Hand-overs: each hot primary to its standby until the three are on
		// three members, and every shard PRIMARY with its standby again.
		waitfor.Every(s, 200*time.Millisecond, 90*time.Second,
			"load placement to spread the hot primaries over 3 members, every shard PRIMARY with its standby STANDBY", func() (bool, string) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				as, err := c.assignments(ctx)
				if err != nil {
					return false, err.Error()
				}
				if ok, why := everyShardPaired(as); !ok {
					return false, why
				}
				on := map[string]bool{}
				for _, sh := range hot {
					on[primaryMember(as, sh)] = true
				}
				if len(on) != skewHot {
					return false, fmt.Sprintf("hot primaries on %v; standbys on %v; load reports: %s; moves so far %v",
						primariesOfShards(as, hot), standbysOf(as, hot), loadReports(c, hot), loadMoves(members))
				}
				return true, ""
			})
		ready = time.Now()
	}
	// Measure once every hot primary, where it now is, has committed since
	// the load began (load mode: since the hand-overs were done).
	waitCommittedSince(s, members, ready, skewHot, func(id string) bool { return slices.Contains(hot, id) })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	before, err := c.assignments(ctx)
	cancel()
	if err != nil {
		s.Fatal(err)
	}
	moves0 := totalMoves(loadMoves(members))
	cpu0, other0 := membersCPU(s, members), othersCPU(s, c)
	t0 := time.Now()
	time.Sleep(skewWindow) // the measurement window, not a wait for a condition
	cpu1, other1 := membersCPU(s, members), othersCPU(s, c)
	window := time.Since(t0)
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	after, err := c.assignments(ctx)
	cancel()
	if err != nil {
		s.Fatal(err)
	}
	// Not a failure: hand-overs during the window are load placement's
	// own doing, and what they cost is part of its figure; the log says so.
	churn := fmt.Sprintf("%v primaries handed over for load during the window", totalMoves(loadMoves(members))-moves0)
	if p0, p1 := primariesOfShards(before, hot), primariesOfShards(after, hot); !slices.Equal(p0, p1) {
		churn += fmt.Sprintf(", the hot ones among them (on %v, then %v)", p0, p1)
	}

	acked, _, err := load.stop()
	if err != nil {
		s.Fatal(err)
	}
	if rate := float64(acked) / time.Since(loadStart).Seconds(); rate < 0.95*skewRate {
		s.Fatalf("%s: the load kept %.0f lines/s, not %d: the figure is not at the stated load", mode, rate, skewRate)
	}

	var sum, most float64
	parts := make([]string, len(members))
	for i, m := range members {
		used := cpu1[i] - cpu0[i]
		sum += used
		most = max(most, used)
		parts[i] = fmt.Sprintf("%s=%.2f", m.id, used/window.Seconds())
	}
	mean := sum / float64(len(members))
	if mean <= 0 {
		s.Fatalf("%s: the members used no CPU in %s", mode, window)
	}
	sec := window.Seconds()
	s.Logf("%s: cores used over %s: %s (not counted: publisher=%.2f etcd=%.2f nats=%.2f); %s; hot primaries on %v, lag %s; load reports %s; load moves %v",
		mode, window.Round(time.Millisecond), strings.Join(parts, " "),
		(other1[0]-other0[0])/sec, (other1[1]-other0[1])/sec, (other1[2]-other0[2])/sec, churn,
		primariesOfShards(after, hot), hotLag(members, hot), loadReports(c, hot), loadMoves(members))
	c.stopMembers() // before etcd and nats-server (the scope's cleanups), and before the next cluster
	return most / mean
}

// pickHot returns the hot shards and their partitions: the worst case for
// count placement, three shards whose primaries are on one member, so that
// member alone runs 90% of the input. It takes the first member, by id,
// that leads at least skewHot shards (else the one leading the most) and
// its primaries in shard order, preferring shards whose standbys are on
// different members: the standbys are where load placement can hand the
// primaries over to, and with all three standbys on one member it could
// spread them over two members only.
func pickHot(tb testing.TB, as []assignment) ([]string, []int) {
	tb.Helper()
	led := map[string][]string{} // member -> its primaries
	standby := map[string]string{}
	for _, a := range as {
		if a.slot == 0 {
			led[a.member] = append(led[a.member], a.shard)
		} else {
			standby[a.shard] = a.member
		}
	}
	ids := make([]string, 0, len(led))
	for id := range led {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	pick := ""
	for _, id := range ids {
		if len(led[id]) >= skewHot {
			pick = id
			break
		}
		if pick == "" || len(led[id]) > len(led[pick]) {
			pick = id
		}
	}
	prims := led[pick]
	sort.Strings(prims)
	var hot []string
	seen := map[string]bool{}
	for _, sh := range prims { // first one shard per standby member
		if len(hot) < skewHot && !seen[standby[sh]] {
			hot, seen[standby[sh]] = append(hot, sh), true
		}
	}
	for _, sh := range prims { // then fill up in shard order
		if len(hot) < skewHot && !slices.Contains(hot, sh) {
			hot = append(hot, sh)
		}
	}
	if len(hot) < skewHot {
		tb.Fatalf("no member leads %d shards: %v", skewHot, led)
	}
	sort.Strings(hot)
	parts := make([]int, len(hot))
	for i, sh := range hot {
		n, err := strconv.Atoi(strings.TrimPrefix(sh, "wordcount-"))
		if err != nil {
			tb.Fatalf("shard %s: %v", sh, err)
		}
		parts[i] = n // shard wordcount-%04d reads partition %d of words
	}
	return hot, parts
}

// everyShardPaired reports whether every one of the skewShards shards has
// a PRIMARY in slot 0 and a STANDBY in a standby slot, and nothing else.
func everyShardPaired(as []assignment) (bool, string) {
	byShard := map[string][]assignment{}
	for _, a := range as {
		byShard[a.shard] = append(byShard[a.shard], a)
	}
	if len(byShard) != skewShards {
		return false, fmt.Sprintf("%d of %d shards assigned", len(byShard), skewShards)
	}
	for id, rs := range byShard {
		sort.Slice(rs, func(i, j int) bool { return rs[i].slot < rs[j].slot })
		if len(rs) != 2 || rs[0].slot != 0 || rs[0].state != "PRIMARY" || rs[1].state != "STANDBY" {
			return false, fmt.Sprintf("shard %s: %+v", id, rs)
		}
	}
	return true, ""
}

// primaryMember is the member holding shard's slot 0 ("" for none).
func primaryMember(as []assignment, shard string) string {
	for _, a := range as {
		if a.shard == shard && a.slot == 0 {
			return a.member
		}
	}
	return ""
}

// primariesOfShards lists the members holding slot 0 of shards, in order.
func primariesOfShards(as []assignment, shards []string) []string {
	out := make([]string, len(shards))
	for i, sh := range shards {
		out[i] = primaryMember(as, sh)
	}
	return out
}

// standbysOf lists the members holding the standby slots of shards.
func standbysOf(as []assignment, shards []string) []string {
	out := make([]string, len(shards))
	for i, sh := range shards {
		for _, a := range as {
			if a.shard == sh && a.slot > 0 {
				out[i] += a.member + "(" + a.state + ")"
			}
		}
	}
	return out
}

// loadReports summarises the members' load reports in etcd: each
// member's total primary busy time (cores) and the hot shards' (as
// shard@member=cores/term).
func loadReports(c *cluster, hot []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := c.client.Get(ctx, allocator.LoadsPrefix("/consumerd"), clientv3.WithPrefix())
	if err != nil {
		return "reading: " + err.Error()
	}
	var parts []string
	for _, kv := range resp.Kvs {
		key := strings.TrimPrefix(string(kv.Key), allocator.LoadsPrefix("/consumerd"))
		r, err := allocator.DecodeLoadReport(kv.Value)
		if err != nil {
			parts = append(parts, key+": "+err.Error())
			continue
		}
		var total int64
		var hs []string
		for id, p := range r.Primaries {
			total += p.BusyMicros
			if slices.Contains(hot, id) {
				hs = append(hs, fmt.Sprintf("%s=%.3f/t%d", id, float64(p.BusyMicros)/1e6, p.Term))
			}
		}
		sort.Strings(hs)
		parts = append(parts, fmt.Sprintf("%s: %d primaries %.3f cores [%s]", key, len(r.Primaries), float64(total)/1e6, strings.Join(hs, " ")))
	}
	return strings.Join(parts, "; ")
}

// loadMoves is consumerd_allocator_load_moves_total of each member (only
// a leader's counts), from its /metrics.
func loadMoves(members []*member) map[string]string {
	out := map[string]string{}
	for _, m := range members {
		_, body, err := httpGet("http://" + m.httpAddr + "/metrics")
		if err != nil {
			out[m.id] = err.Error()
			continue
		}
		for _, l := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(l, "consumerd_allocator_load_moves_total "); ok {
				out[m.id] = v
			}
		}
	}
	return out
}

// totalMoves sums loadMoves' counters (only the leaders' are not zero).
func totalMoves(byMember map[string]string) float64 {
	var n float64
	for _, v := range byMember {
		f, _ := strconv.ParseFloat(v, 64)
		n += f
	}
	return n
}

// clockTicks is the unit of /proc/<pid>/stat's times (sysconf(_SC_CLK_TCK)).
var clockTicks = sync.OnceValue(func() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > 0 {
			return float64(n)
		}
	}
	return 100 // USER_HZ on every Linux architecture Go supports
})

// membersCPU returns each member process's CPU time so far (procCPU).
func membersCPU(tb testing.TB, members []*member) []float64 {
	tb.Helper()
	out := make([]float64, len(members))
	for i, m := range members {
		if m.proc.exited() {
			tb.Fatalf("member %s exited: %v\n%s", m.id, m.proc.err, m.proc.tail(20))
		}
		out[i] = procCPU(tb, m.proc.cmd.Process.Pid)
	}
	return out
}

// procCPU returns process pid's CPU time so far, every thread's: utime +
// stime of /proc/<pid>/stat, in seconds.
func procCPU(tb testing.TB, pid int) float64 {
	tb.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatalf("CPU time of process %d: %v", pid, err)
	}
	// The command name, in parentheses, may hold spaces: the fields
	// counted from the state (field 3) follow its last ')'.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		tb.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	utime, err1 := strconv.ParseUint(f[14-3], 10, 64)
	stime, err2 := strconv.ParseUint(f[15-3], 10, 64)
	if err1 != nil || err2 != nil {
		tb.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return float64(utime+stime) / clockTicks()
}

// othersCPU is the CPU time so far of what the figure leaves out: this
// process (the publisher), etcd and nats-server.
func othersCPU(tb testing.TB, c *cluster) [3]float64 {
	tb.Helper()
	return [3]float64{procCPU(tb, os.Getpid()), procCPU(tb, c.etcd.cmd.Process.Pid), procCPU(tb, c.nats.cmd.Process.Pid)}
}

// hotLag lists each hot primary's lag (messages behind its source) as its
// member last measured it.
func hotLag(members []*member, hot []string) string {
	var parts []string
	for _, m := range members {
		st, err := memberStatus(m)
		if err != nil {
			parts = append(parts, err.Error())
			continue
		}
		for _, r := range st.Replicas {
			if slices.Contains(hot, r.Shard) && r.Slot == 0 {
				var n int64
				for _, v := range r.Lag {
					n += v
				}
				parts = append(parts, fmt.Sprintf("%s@%s=%d", r.Shard, m.id, n))
			}
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// startSkewLoad publishes corpus lines to topic "words" of c at rate lines
// a second (startLoadRouted), skewHotShare tenths of them to the hot
// partitions (round robin) and the rest round robin over the cold ones.
func startSkewLoad(tb testing.TB, c *cluster, hot, cold []int, rate int) *load {
	tb.Helper()
	// A key per partition, by the publisher's own mapping (PartitionFor):
	// PublishAsync routes each line to the partition chosen for it.
	keyOf := make([]string, skewShards)
	for i, found := 0, 0; found < skewShards; i++ {
		k := "k" + strconv.Itoa(i)
		if p := topic.PartitionFor(k, skewShards); keyOf[p] == "" {
			keyOf[p] = k
			found++
		}
	}
	return startLoadRouted(tb, c, "words", skewShards, rate, func(n int) (string, int) {
		p := cold[(n/10)%len(cold)]
		if d := n % 10; d < skewHotShare {
			p = hot[d%len(hot)]
		}
		return keyOf[p], p
	})
}
