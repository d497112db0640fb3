package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/internal/benchround"
)

// BenchmarkFailover measures, over several kills, the seconds from SIGKILL
// of a member holding primaries to every one of its shards PRIMARY on
// another member (each shard has a hot standby). The baseline it is judged
// against is the lease TTL of the same run: failover cannot beat the lease
// expiry, and the goal is p99 <= TTL + 1s. Each kill is a round of
// internal/benchround (8 by default; CONSUMERD_BENCH_ROUNDS overrides), and
// the figures are quantiles over the kills. The whole measurement runs once,
// whatever b.N is.
func BenchmarkFailover(b *testing.B) {
	const (
		leaseTTL = 2 * time.Second
		kills    = 8 // the default; see benchround.Rounds
		nShards  = 4
	)
	c := newCluster(b, leaseTTL)
	c.mustRun(nil, "topics", "create", "--name", "words", "--partitions", fmt.Sprint(nShards))
	c.mustRun(nil, "topics", "create", "--name", "counts", "--partitions", fmt.Sprint(nShards))
	c.mustRun(nil, "shards", "create", "--app", "wordcount", "--hot-standbys", "1")
	members := []*member{c.addMember("m1", "zone-a"), c.addMember("m2", "zone-b"), c.addMember("m3", "zone-a")}
	byID := map[string]*member{}
	for _, m := range members {
		byID[m.id] = m
		c.start(m)
	}
	stable := func() {
		waitFor(b, 60*time.Second, "all shards PRIMARY with a STANDBY", func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			as, err := c.assignments(ctx)
			if err != nil {
				return false, err.Error()
			}
			prim, stby := map[string]bool{}, map[string]bool{}
			for _, a := range as {
				if a.slot == 0 && a.state == "PRIMARY" {
					prim[a.shard] = true
				}
				if a.slot > 0 && a.state == "STANDBY" {
					stby[a.shard] = true
				}
			}
			return len(prim) == nShards && len(stby) == nShards, fmt.Sprintf("%d primaries, %d standbys", len(prim), len(stby))
		})
	}
	lines, _ := corpus(2000)
	c.mustRun([]byte(strings.Join(lines, "\n")+"\n"), "publish", "--topic", "words")

	b.ResetTimer()
	res := benchround.Collect(b, kills, func(k int) []benchround.Figure {
		stable()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		as, err := c.assignments(ctx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		victim := primariesOf(as)[k%len(primariesOf(as))]
		affected := map[string]bool{}
		for _, a := range as {
			if a.slot == 0 && a.member == victim {
				affected[a.shard] = true
			}
		}
		start := time.Now()
		byID[victim].proc.kill()
		var elapsed, expired time.Duration
		memberKey := "/consumerd/members/" + byID[victim].zone + "/" + victim
		waitForFast(b, 30*time.Second, "affected shards PRIMARY elsewhere", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if expired == 0 {
				// The raw baseline: when etcd expired the victim's lease.
				if r, err := c.client.Get(ctx, memberKey, clientv3.WithCountOnly()); err == nil && r.Count == 0 {
					expired = time.Since(start)
				}
			}
			as, err := c.assignments(ctx)
			if err != nil {
				return false
			}
			ok := map[string]bool{}
			for _, a := range as {
				if a.slot == 0 && a.member != victim && a.state == "PRIMARY" && affected[a.shard] {
					ok[a.shard] = true
				}
			}
			if len(ok) == len(affected) {
				elapsed = time.Since(start)
				return true
			}
			return false
		})
		if expired == 0 || expired > elapsed {
			expired = elapsed
		}
		c.start(byID[victim])
		return []benchround.Figure{
			benchround.F("seconds", elapsed.Seconds(), 2),
			benchround.F("lease_expiry", expired.Seconds(), 2),
			benchround.F("handoff", (elapsed - expired).Seconds(), 3),
		}
	})
	b.StopTimer()
	// min/p50/p99/max: SIGKILL -> every affected shard PRIMARY elsewhere
	// (nearest-rank quantiles over the kills).
	// lease_expiry_p50: SIGKILL -> the victim's member key gone (the raw
	// baseline no failover can beat); handoff: the rest (promotion + fence).
	fmt.Printf("BENCH failover lease_ttl=%s kills=%d min=%.2f p50=%.2f p99=%.2f max=%.2f lease_expiry_p50=%.2f handoff_p50=%.3f handoff_max=%.3f\n",
		leaseTTL, res.Rounds(), res.Min("seconds"), res.Quantile("seconds", 0.50), res.Quantile("seconds", 0.99), res.Max("seconds"),
		res.Quantile("lease_expiry", 0.50), res.Quantile("handoff", 0.50), res.Max("handoff"))
}

// waitForFast polls cond every 20ms (a timing measurement needs finer
// resolution than waitFor's).
func waitForFast(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
