package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/internal/benchround"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// failoverLoad is the lines a second published to the wordcount shards
// during BenchmarkFailover: enough that every standby tails a busy log and
// the new primary always has input, little enough for two cores.
const failoverLoad = 4000

// failoverSnapshotBytes is the shards' snapshot_interval_bytes in
// BenchmarkFailover: a snapshot about every half minute at failoverLoad.
const failoverSnapshotBytes = 2 << 20

// benchPoll is how often BenchmarkFailover polls: the waits between a kill
// and the next cost its run time thirty times over.
const benchPoll = 20 * time.Millisecond

// BenchmarkFailover measures, at lease TTLs 2s and 10s, the seconds from
// SIGKILL of a member holding primaries until each of its shards has
// committed a transaction on its new primary, the shard's hot standby on
// another member, while lines keep flowing to every shard (failoverLoad a
// second, published from this process), so the standby tails a busy log and
// the new primary has input at once. Per TTL it prints
//
//	BENCH failover ttl=2s load=4000/s until=first_commit kills=30 min=… p50=… p99=… max=… lease_expiry_p50=… handoff_p50=… handoff_max=… fence_p50=… commit_p50=… standby_behind_p50=… standby_behind_max=…
//
// Each kill is a round of internal/benchround (30 by default;
// CONSUMERD_BENCH_ROUNDS overrides), the victim restarted and the placement
// settled again before the next; p50 and p99 are nearest-rank quantiles
// over the kills, so with 30 kills p99 is the largest. The
// baseline, measured in the same kill, is lease_expiry: SIGKILL until etcd
// deleted the victim's member key (its watch event), which no failover can
// beat, and which is below the TTL when the kill came a while after a
// keep-alive. handoff is the rest, split into fence (until the last
// successor's fence: the leader's reaction, promotion, the standby's replay
// of the log's tail, the fence append) and commit (until the last first
// commit: scanners, the first transaction). Fence and first commit are the
// nats-server's timestamps of those recovery-log records (same host clock),
// exact where a poll of a primary's last_commit (its latest, not its first)
// is up to a poll late; the new primary must then report a last_commit of
// its own no earlier. standby_behind is how many recovery-log records the
// standby had yet to apply at the kill (the primary's applied id minus the
// standby's in /v1/status, the worst affected shard): measured, not
// assumed. The goal is p99 <= TTL + 1s at both TTLs. At the end the counts
// must equal what was published, exactly: no kill lost or doubled a line.
// The whole measurement runs once, whatever b.N is.
func BenchmarkFailover(b *testing.B) {
	for _, ttl := range []time.Duration{2 * time.Second, 10 * time.Second} {
		b.Run("ttl="+ttl.String(), func(b *testing.B) { benchFailover(b, ttl) })
	}
}

func benchFailover(b *testing.B, ttl time.Duration) {
	const nShards = 4
	c := newCluster(b, ttl)
	c.mustRun(nil, "topics", "create", "--name", "words", "--partitions", fmt.Sprint(nShards))
	c.mustRun(nil, "topics", "create", "--name", "counts", "--partitions", fmt.Sprint(nShards))
	// What shards create makes, plus a snapshot every failoverSnapshotBytes
	// of log: a SIGKILLed member's databases lose what RocksDB had not
	// flushed (its own WAL is off: the recovery log is the WAL), so the
	// restarted victim rebuilds its replicas from the newest snapshot and
	// the log after it; with the default interval it would replay the whole
	// log, ever longer over the kills.
	var specs strings.Builder
	for i := range nShards {
		fmt.Fprintf(&specs, "- {id: wordcount-%04d, app: wordcount, sources: [{topic: words, partition: %d}], hot_standbys: 1, snapshot_interval_bytes: %d}\n", i, i, failoverSnapshotBytes)
	}
	specFile := filepath.Join(c.dir, "specs.yaml")
	if err := os.WriteFile(specFile, []byte(specs.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	c.mustRun(nil, "shards", "apply", "-f", specFile)
	members := []*member{c.addMember("m1", "zone-a"), c.addMember("m2", "zone-b"), c.addMember("m3", "zone-a")}
	byID := map[string]*member{}
	for _, m := range members {
		byID[m.id] = m
		c.start(m)
	}
	settled := func() []assignment { return waitSettled(b, c, len(members), nShards) }
	settled()

	load := startLoad(b, c, "words", nShards, failoverLoad)
	loadStart := time.Now()
	waitCommittedSince(b, members, loadStart, nShards, func(string) bool { return true })

	logs := clusterWAL(b, c) // reads the recovery logs: the exact first commits
	defer logs.Close()

	b.ResetTimer()
	res := benchround.Collect(b, 30, func(k int) []benchround.Figure {
		as := settled()
		prims := primariesOf(as)
		victim := byID[prims[k%len(prims)]]
		standbyOf := map[string]string{} // affected shard -> its standby's member
		for _, a := range as {
			if a.slot == 0 && a.member == victim.id {
				standbyOf[a.shard] = ""
			}
		}
		for _, a := range as {
			if _, ok := standbyOf[a.shard]; ok && a.slot > 0 {
				standbyOf[a.shard] = a.member
			}
		}
		behind, standbyAt := standbyBehind(b, victim, standbyOf, byID)

		// Timed by events, not polls: etcd's watch says when the lease
		// expired, the recovery logs' own timestamps when each successor
		// fenced and first committed.
		ctx, cancel := context.WithTimeout(context.Background(), ttl+30*time.Second)
		defer cancel()
		memberKey := "/consumerd/members/" + victim.zone + "/" + victim.id
		cur, err := c.client.Get(ctx, memberKey, clientv3.WithCountOnly())
		if err != nil {
			b.Fatalf("reading the member key of %s: %v", victim.id, err)
		}
		gone := c.client.Watch(ctx, memberKey, clientv3.WithRev(cur.Header.Revision+1), clientv3.WithFilterPut())
		start := time.Now()
		victim.proc.kill()
		expired := waitDeleted(b, ctx, gone, memberKey).Sub(start)
		var fenced, total time.Duration
		commits := map[string]time.Time{}
		for sh := range standbyOf {
			fenceAt, commitAt, err := successorCommit(ctx, logs, sh, standbyAt[sh], victim.zone+"/"+victim.id)
			if err != nil {
				b.Fatal(err)
			}
			if !fenceAt.After(start) {
				b.Fatalf("shard %s: its successor's fence at %s precedes the kill at %s", sh, fenceAt.Format(time.StampMicro), start.Format(time.StampMicro))
			}
			fenced, total = max(fenced, fenceAt.Sub(start)), max(total, commitAt.Sub(start))
			commits[sh] = commitAt
		}
		for sh, at := range commits {
			checkCommitted(b, members, victim, sh, at)
		}
		// The watch event arrives a little after etcd deleted the key: keep
		// the parts in order.
		expired = min(expired, fenced)
		c.start(victim)
		return []benchround.Figure{
			benchround.F("seconds", total.Seconds(), 2),
			benchround.F("lease_expiry", expired.Seconds(), 2),
			benchround.F("handoff", (total - expired).Seconds(), 3),
			benchround.F("fence", (fenced - expired).Seconds(), 3),
			benchround.F("commit", (total - fenced).Seconds(), 3),
			benchround.F("standby_behind", float64(behind), 0),
		}
	})
	b.StopTimer()
	settled()

	acked, counts, err := load.stop()
	if err != nil {
		b.Fatal(err)
	}
	if rate := float64(acked) / time.Since(loadStart).Seconds(); rate < 0.95*failoverLoad {
		b.Fatalf("the load kept %.0f lines/s, not %d: the figures are not at the stated load", rate, failoverLoad)
	}
	want := renderCounts(counts)
	waitfor.Until(b, 120*time.Second, fmt.Sprintf("the counts to equal the %d lines published", acked), func() (bool, string) {
		out, err := c.run(nil, "query", "--app", "wordcount", "--all")
		if err != nil {
			return false, err.Error()
		}
		return out == want, diffCounts(out, want)
	})

	fmt.Printf("BENCH failover ttl=%s load=%d/s until=first_commit kills=%d min=%.2f p50=%.2f p99=%.2f max=%.2f lease_expiry_p50=%.2f handoff_p50=%.3f handoff_max=%.3f fence_p50=%.3f commit_p50=%.3f standby_behind_p50=%.0f standby_behind_max=%.0f\n",
		ttl, failoverLoad, res.Rounds(), res.Min("seconds"), res.Quantile("seconds", 0.50), res.Quantile("seconds", 0.99), res.Max("seconds"),
		res.Quantile("lease_expiry", 0.50), res.Quantile("handoff", 0.50), res.Max("handoff"),
		res.Quantile("fence", 0.50), res.Quantile("commit", 0.50),
		res.Quantile("standby_behind", 0.50), res.Max("standby_behind"))
}

// waitSettled waits until the cluster is back in its balanced placement and
// returns its assignments: every member announced, every shard with exactly
// a PRIMARY in slot 0 and a STANDBY in a standby slot in another zone, and
// every member holding at least its share of the replicas (the scheduler
// balances to within one), so that a kill never lands in a rebalance.
func waitSettled(tb testing.TB, c *cluster, nMembers, nShards int) []assignment {
	tb.Helper()
	var as []assignment
	share := 2 * nShards / nMembers
	waitfor.Until(tb, 90*time.Second, "every shard PRIMARY with a STANDBY in the other zone, balanced over every member", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		ms, err := c.client.Get(ctx, "/consumerd/members/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return false, fmt.Sprintf("reading members: %v", err)
		}
		if ms.Count != int64(nMembers) {
			return false, fmt.Sprintf("%d of %d members announced", ms.Count, nMembers)
		}
		if as, err = c.assignments(ctx); err != nil {
			return false, fmt.Sprintf("reading assignments: %v", err)
		}
		byShard, perMember := map[string][]assignment{}, map[string]int{}
		for _, a := range as {
			byShard[a.shard] = append(byShard[a.shard], a)
			perMember[a.member]++
		}
		if len(byShard) != nShards {
			return false, fmt.Sprintf("%d of %d shards assigned", len(byShard), nShards)
		}
		for id, rs := range byShard {
			sort.Slice(rs, func(i, j int) bool { return rs[i].slot < rs[j].slot })
			if len(rs) != 2 || rs[0].slot != 0 || rs[0].state != "PRIMARY" || rs[1].state != "STANDBY" || rs[0].zone == rs[1].zone {
				return false, fmt.Sprintf("shard %s: %+v", id, rs)
			}
		}
		if len(perMember) != nMembers {
			return false, fmt.Sprintf("replicas on %d of %d members: %v", len(perMember), nMembers, perMember)
		}
		for m, n := range perMember {
			if n < share {
				return false, fmt.Sprintf("%s holds %d replicas, fewer than its share %d: %v", m, n, share, perMember)
			}
		}
		return true, ""
	})
	return as
}

// standbyBehind returns how many recovery-log records the standbys of the
// victim's shards (standbyOf: shard -> standby's member) lagged the victim's
// primaries, the worst shard, from their /v1/status fetched at once, and
// each standby's applied id.
func standbyBehind(tb testing.TB, victim *member, standbyOf map[string]string, byID map[string]*member) (int64, map[string]message.MessageID) {
	tb.Helper()
	ids := []string{victim.id}
	for _, m := range standbyOf {
		if m != "" && !slices.Contains(ids, m) {
			ids = append(ids, m)
		}
	}
	sts := make([]api.StatusResponse, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { sts[i], errs[i] = memberStatus(byID[id]) })
	}
	wg.Wait()
	applied := map[string]map[string]uint64{} // member -> shard -> applied
	for i, id := range ids {
		if errs[i] != nil {
			tb.Fatalf("measuring how far the standbys are behind: %v", errs[i])
		}
		applied[id] = map[string]uint64{}
		for _, r := range sts[i].Replicas {
			applied[id][r.Shard] = r.Applied
		}
	}
	var worst int64
	at := map[string]message.MessageID{}
	for sh, m := range standbyOf {
		if m == "" {
			tb.Fatalf("shard %s has no standby at the kill", sh)
		}
		worst = max(worst, int64(applied[victim.id][sh])-int64(applied[m][sh]))
		at[sh] = message.MessageID(applied[m][sh])
	}
	return worst, at
}

// waitDeleted returns when the watch w of key reported its deletion.
func waitDeleted(tb testing.TB, ctx context.Context, w clientv3.WatchChan, key string) time.Time {
	tb.Helper()
	for resp := range w {
		if err := resp.Err(); err != nil {
			tb.Fatalf("watching %s: %v", key, err)
		}
		for _, ev := range resp.Events {
			if ev.Type == mvccpb.DELETE {
				return time.Now()
			}
		}
	}
	tb.Fatalf("waiting for %s to expire: %v", key, ctx.Err())
	return time.Time{}
}

// successorCommit reads shard's recovery log after id after until the
// first transaction of the primary that fenced it after the victim
// (victim: the dead primary's zone/id), and returns when the nats-server on
// this host stored that fence and that transaction: the takeover and the
// first commit, exactly, where a poll of a primary's last_commit (its
// latest, not its first) would see them up to one poll late.
func successorCommit(ctx context.Context, op wal.Opener, shard string, after message.MessageID, victim string) (fenceAt, commitAt time.Time, err error) {
	w, err := op.Open(ctx, &wal.OpenOption{Channel: recoverylog.Channel(shard)}) // term 0: a reader, as a standby's
	if err != nil {
		return fenceAt, commitAt, fmt.Errorf("opening the recovery log of %s: %w", shard, err)
	}
	defer w.Close()
	sc, err := w.Read(ctx, wal.ReadOption{Name: "failover-bench", DeliverPolicy: wal.DeliverStartAfter(after)})
	if err != nil {
		return fenceAt, commitAt, fmt.Errorf("reading the recovery log of %s after %d: %w", shard, after, err)
	}
	defer sc.Close()
	var fence *recoverylog.Record // the newest fence read
	for {
		select {
		case m := <-sc.Chan():
			r, err := recoverylog.Decode(m.Payload)
			if err != nil {
				return fenceAt, commitAt, fmt.Errorf("recovery log of %s at %d: %w", shard, m.ID, err)
			}
			switch {
			case r.Kind == recoverylog.KindFence:
				fence, fenceAt = r, m.AppendTime
			case r.Kind == recoverylog.KindTxn && fence != nil && fence.Author != victim && r.Term == fence.Term && r.Part+1 >= r.Parts:
				return fenceAt, m.AppendTime, nil // the transaction's last chunk: its commit
			}
		case <-sc.Done():
			return fenceAt, commitAt, fmt.Errorf("recovery log of %s: scanner stopped: %w", shard, sc.Error())
		case <-ctx.Done():
			return fenceAt, commitAt, fmt.Errorf("recovery log of %s: no commit of a successor of %s after id %d: %w", shard, victim, after, ctx.Err())
		}
	}
}

// checkCommitted checks that the log's commit is the new primary's own: a
// member other than the victim reports shard PRIMARY in slot 0 with a
// last_commit (which it has only after its own first) at or after at.
func checkCommitted(tb testing.TB, members []*member, victim *member, shard string, at time.Time) {
	tb.Helper()
	waitfor.Every(tb, benchPoll, 10*time.Second, "the new primary of "+shard+" to report the commit the log holds", func() (bool, string) {
		for _, m := range members {
			if m == victim {
				continue
			}
			st, err := memberStatus(m)
			if err != nil {
				return false, err.Error()
			}
			for _, r := range st.Replicas {
				if r.Shard == shard && r.Slot == 0 && r.State == "PRIMARY" && r.LastCommit != nil && !r.LastCommit.Before(at) {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("no PRIMARY of %s reports a commit at or after %s", shard, at.Format(time.StampMicro))
	})
}

// waitCommittedSince waits until want primaries of the shards that count
// says count, on any of members, have committed since since.
func waitCommittedSince(tb testing.TB, members []*member, since time.Time, want int, count func(shard string) bool) {
	tb.Helper()
	waitfor.Every(tb, benchPoll, 60*time.Second, "the primaries to commit the load", func() (bool, string) {
		n := 0
		for _, m := range members {
			st, err := memberStatus(m)
			if err != nil {
				return false, err.Error()
			}
			for _, r := range st.Replicas {
				if count(r.Shard) && r.Slot == 0 && r.State == "PRIMARY" && r.LastCommit != nil && r.LastCommit.After(since) {
					n++
				}
			}
		}
		return n == want, fmt.Sprintf("%d of %d primaries committed since %s", n, want, since.Format(time.StampMilli))
	})
}

// memberStatus is m's /v1/status.
func memberStatus(m *member) (api.StatusResponse, error) {
	var st api.StatusResponse
	code, body, err := httpGet("http://" + m.httpAddr + "/v1/status")
	if err != nil {
		return st, fmt.Errorf("/v1/status of %s: %w", m.id, err)
	}
	if code != 200 {
		return st, fmt.Errorf("/v1/status of %s: %d %s", m.id, code, body)
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("/v1/status of %s: decoding: %w", m.id, err)
	}
	return st, nil
}
