package allocator

// This file holds the converger: the leader's loop step that plans a round
// (plan.go) and executes it against etcd.

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/consumerd/consumerd/internal/retry"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// converger is the leader's converge state.
type converger struct {
	// txns counts converge transactions sent, rounds the rounds run and
	// conflicts the txns whose compares failed (tests and benchmarks read
	// them; the metrics count the same).
	txns, rounds, conflictTxns atomic.Int64
	m                          *Member
	log                        hclog.Logger
	lastShortfall              string
	failures                   int            // consecutive transactions whose compares failed
	conflicts                  *retry.Backoff // the pause after each of them
	// wake is when the next scheduled restart is due (zero: none); Run
	// runs a round then even if nothing changed.
	wake time.Time
}

// init binds the converger to its member and names its logger.
func (c *converger) init(m *Member) {
	c.m = m
	c.log = m.log.Named("converge")
	c.conflicts = retry.Policy{Initial: 5 * time.Millisecond, Max: 2 * time.Second}.Start()
}

// round runs one schedule-and-converge round on snap: it plans, writes the
// transactions (stopping at the first one whose compares fail), waits until
// the mirror reflects the last write, and reports again=true when it wrote
// (or tried to write) anything, so the caller recomputes at once.
func (c *converger) round(ctx context.Context, snap Snapshot) (again bool, err error) {
	me, ok := c.m.ks.Member(c.m.cfg.Zone, c.m.cfg.MemberID)
	if !ok {
		return false, fmt.Errorf("leader's own member key is missing")
	}
	if c.m.cfg.PlaceByCount {
		snap.Loads = nil // no load known: primaries stay where count put them
	}
	plan := planConverge(snap, c.m.prefix)
	c.report(snap, plan)
	steps, wake := planRestarts(snap, time.Now())
	c.wake = wake
	if len(plan.groups) == 0 && len(steps) == 0 {
		return false, nil
	}
	// Every transaction also compares the leader's own member key, so the
	// writes of a leader deposed since the snapshot fail.
	leaderCmp := clientv3.Compare(clientv3.ModRevision(c.m.key), "=", me.ModRevision)
	txns := batchGroups(plan.groups, leaderCmp)
	if len(steps) > 0 {
		c.log.Info("restart policy", "steps", describeSteps(steps))
		txns = append(txns, restartTxns(c.m.prefix, steps, leaderCmp)...)
	}
	return true, c.write(ctx, txns)
}

// report updates the round's metrics and logs the items short of replicas
// when that list changed (not every round, so a lasting shortfall does not
// flood the log).
func (c *converger) report(snap Snapshot, plan convergePlan) {
	convergeRounds.Inc()
	c.rounds.Add(1)
	scheduleSeconds.Observe(plan.solveTime.Seconds())
	membersGauge.Set(float64(len(snap.Members)))
	itemsGauge.Set(float64(len(snap.Items)))
	desiredSlotsGauge.Set(float64(plan.slots))
	shortfallGauge.Set(float64(len(plan.shortfall)))
	loadUnsettledGauge.Set(float64(plan.loadUnsettled))
	if plan.loadMoves > 0 {
		loadMovesTotal.Add(float64(plan.loadMoves))
		c.log.Info("handing primaries to standbys to balance load", "moves", plan.loadMoves)
	}
	sf := strings.Join(plan.shortfall, ", ")
	if sf == c.lastShortfall {
		return
	}
	c.lastShortfall = sf
	if len(plan.shortfall) > 0 {
		shown := plan.shortfall
		if len(shown) > 20 {
			shown = shown[:20]
		}
		c.log.Warn("not enough member capacity for the desired replication; items short of replicas (got/want)",
			"count", len(plan.shortfall), "items", strings.Join(shown, ", "))
	} else {
		c.log.Info("every item has its desired replication")
	}
}

// write commits txns in order, stopping at the first whose compares fail
// (later ones were planned on the same, now stale, snapshot), and waits
// until the mirror reflects the last revision written.
func (c *converger) write(ctx context.Context, txns []plannedTxn) error {
	var lastRev int64
	for _, t := range txns {
		c.txns.Add(1)
		convergeTxns.Inc()
		resp, err := c.m.cfg.Client.Txn(ctx).If(t.cmps...).Then(t.ops...).Commit()
		if err != nil {
			etcdErrors.Inc()
			return fmt.Errorf("converge txn (%d ops): %w", len(t.ops), err)
		}
		lastRev = resp.Header.Revision
		if !resp.Succeeded {
			return c.compareFailed(ctx, t, lastRev)
		}
		c.failures = 0
		c.conflicts.Reset()
		assignmentsAdded.Add(float64(t.adds))
		assignmentsRemoved.Add(float64(t.removes))
		assignmentsPromoted.Add(float64(t.promotions))
		if c.log.IsDebug() {
			c.log.Debug("converge txn", "revision", lastRev, "ops", strings.Join(t.descs, "; "))
		}
		if len(t.repairs) > 0 {
			c.log.Warn("deleted assignment keys whose value does not decode (no member could act on them)",
				"revision", lastRev, "keys", strings.Join(t.repairs, "; "))
		}
	}
	return c.m.ks.WaitForRevision(ctx, lastRev)
}

// compareFailed handles transaction t failing its compares at revision rev:
// something changed since the snapshot, so the caller recomputes once the
// mirror caught up. It backs off when this keeps happening (e.g. a key the
// mirror cannot decode), so a stuck compare is not a hot loop.
func (c *converger) compareFailed(ctx context.Context, t plannedTxn, rev int64) error {
	c.failures++
	convergeConflicts.Inc()
	c.conflictTxns.Add(1)
	if c.failures%20 == 0 {
		c.log.Warn("converge transactions keep failing their compares", "failures", c.failures, "ops", strings.Join(t.descs, "; "))
	}
	if err := c.m.ks.WaitForRevision(ctx, rev); err != nil {
		return err
	}
	return c.conflicts.Wait(ctx, nil)
}
