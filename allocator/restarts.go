package allocator

// This file holds the failed-replica restart policy: an item may ask the
// leader to restart its FAILED replicas by itself, after a backoff that
// doubles with each attempt, up to a number of attempts. The leader keeps
// each item's attempts in <root>/restarts/<item> (RestartRecord), so a new
// leader continues where the old one stopped. planRestarts is the pure core;
// converger.restartRound writes its steps.

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

const restartsDir = "/restarts/"

// RestartsPrefix is the key prefix of every restart record.
func RestartsPrefix(prefix string) string { return cleanPrefix(prefix) + restartsDir }

// RestartKey is <root>/restarts/<item>.
func RestartKey(prefix, item string) string { return RestartsPrefix(prefix) + item }

// RestartPolicy says how the leader restarts an item's FAILED replicas: the
// first restart InitialBackoff after the failure was seen, each next one
// after twice the wait before, at most MaxBackoff, and no more than
// MaxAttempts restarts in a row; then the replica stays FAILED until a person
// acts (an unassign resets the count). A run of RestartResetAfter without a
// restart starts the count over.
type RestartPolicy struct {
	MaxAttempts    int
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
}

// RestartResetAfter is how long after its last restart an item's attempts
// start from zero again: a failure that far apart is a new problem.
const RestartResetAfter = 10 * time.Minute

// backoff is the wait before restart number attempt+1.
func (p RestartPolicy) backoff(attempt int) time.Duration {
	d := p.InitialBackoff
	for i := 0; i < attempt && d < p.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, p.MaxBackoff)
}

// Restartable is implemented by items with an optional restart policy.
type Restartable interface {
	// RestartPolicy returns the policy and true, or false for manual
	// restarts only.
	RestartPolicy() (RestartPolicy, bool)
}

// RestartRecord is the value of <root>/restarts/<item>, written by the
// leader: the automatic restarts of the item's FAILED replicas.
type RestartRecord struct {
	// Attempts is the restarts done in the current run of failures.
	Attempts int `json:"attempts"`
	// MaxAttempts is the policy's limit when the record was written.
	MaxAttempts int `json:"max_attempts"`
	// Failure is the ModRevision of the FAILED assignment key the record is
	// about: each failure is scheduled once.
	Failure int64 `json:"failure_revision"`
	// Replica is the failed replica, "zone/member slot N".
	Replica string `json:"replica"`
	// Error is the failure's error.
	Error string `json:"error,omitempty"`
	// NotBefore is when the leader restarts the replica (zero once given up).
	NotBefore time.Time `json:"not_before"`
	// LastRestart is when the leader last restarted one of the item's
	// replicas.
	LastRestart time.Time `json:"last_restart"`
	// Exhausted says the attempts are used up: the replica stays FAILED.
	Exhausted bool `json:"exhausted,omitempty"`
	// ModRevision of the record's key (not stored in the value).
	ModRevision int64 `json:"-"`
}

// DecodeRestartRecord decodes a restart record.
func DecodeRestartRecord(raw []byte) (RestartRecord, error) {
	var r RestartRecord
	if err := json.Unmarshal(raw, &r); err != nil {
		return RestartRecord{}, fmt.Errorf("restart record: %w", err)
	}
	if r.Attempts < 0 {
		return RestartRecord{}, fmt.Errorf("restart record: attempts %d is negative", r.Attempts)
	}
	return r, nil
}

// restartStep is one write of planRestarts: put rec at the item's record
// key and, when restart is set, delete that FAILED assignment key.
type restartStep struct {
	item    string
	rec     RestartRecord
	prevRev int64 // the record's ModRevision the step replaces (0: none)
	restart *Assignment
}

func (s restartStep) String() string {
	if s.restart != nil {
		return fmt.Sprintf("restart %s slot %d on %s/%s (attempt %d of %d)", s.item, s.restart.Slot, s.restart.Zone, s.restart.Member, s.rec.Attempts, s.rec.MaxAttempts)
	}
	if s.rec.Exhausted {
		return fmt.Sprintf("give up on %s: %d restarts done (max %d)", s.item, s.rec.Attempts, s.rec.MaxAttempts)
	}
	return fmt.Sprintf("schedule %s restart %d of %d at %s", s.item, s.rec.Attempts+1, s.rec.MaxAttempts, s.rec.NotBefore.UTC().Format(time.RFC3339Nano))
}

// planRestarts decides, at now, what the leader writes for the FAILED
// replicas of items with a restart policy, and when it must look again
// (zero: no restart pending). Per item it acts on its first FAILED replica
// (by slot): a failure not seen before is scheduled (or, with the attempts
// used up, given up on); a scheduled one whose time came is restarted by
// deleting its assignment key, which the converge round then fills again.
func planRestarts(snap Snapshot, now time.Time) (steps []restartStep, wake time.Time) {
	failed := map[string]Assignment{}
	for _, a := range snap.Assignments {
		if a.Status.State != StateFailed {
			continue
		}
		if cur, ok := failed[a.Item]; !ok || a.Slot < cur.Slot {
			failed[a.Item] = a
		}
	}
	items := make([]string, 0, len(failed))
	for id := range failed {
		items = append(items, id)
	}
	sort.Strings(items)
	later := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	for _, id := range items {
		p, ok := restartPolicyOf(snap, id)
		if !ok {
			continue
		}
		a := failed[id]
		rec := snap.Restarts[id]
		if rec.Failure == a.ModRevision {
			if rec.Exhausted {
				continue
			}
			if now.Before(rec.NotBefore) {
				later(rec.NotBefore)
				continue
			}
			next := rec
			next.Attempts++
			next.LastRestart = now
			steps = append(steps, restartStep{item: id, rec: next, prevRev: rec.ModRevision, restart: &a})
			continue
		}
		attempts := rec.Attempts
		if !rec.LastRestart.IsZero() && now.Sub(rec.LastRestart) > RestartResetAfter {
			attempts = 0
		}
		next := RestartRecord{Attempts: attempts, MaxAttempts: p.MaxAttempts, Failure: a.ModRevision,
			Replica: fmt.Sprintf("%s/%s slot %d", a.Zone, a.Member, a.Slot), Error: truncateError(a.Status.Error),
			LastRestart: rec.LastRestart}
		if attempts >= p.MaxAttempts {
			next.Exhausted = true
		} else {
			next.NotBefore = now.Add(p.backoff(attempts))
			later(next.NotBefore)
		}
		steps = append(steps, restartStep{item: id, rec: next, prevRev: rec.ModRevision})
	}
	return steps, wake
}

// restartPolicyOf is item id's restart policy, if it has one.
func restartPolicyOf(snap Snapshot, id string) (RestartPolicy, bool) {
	it, ok := snap.Items[id]
	if !ok {
		return RestartPolicy{}, false
	}
	r, ok := it.Item.(Restartable)
	if !ok {
		return RestartPolicy{}, false
	}
	p, ok := r.RestartPolicy()
	return p, ok && p.MaxAttempts > 0
}

// truncateError keeps a record's copy of an error short.
func truncateError(s string) string {
	const limit = 512
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "…"
}

// restartTxns turns steps into transactions: each guarded by the record's
// revision (a record changed by another leader fails it), the restarted
// assignment's revision, and leaderCmp.
func restartTxns(prefix string, steps []restartStep, leaderCmp clientv3.Cmp) []plannedTxn {
	out := make([]plannedTxn, 0, len(steps))
	for _, s := range steps {
		key := RestartKey(prefix, s.item)
		val, _ := json.Marshal(s.rec) // a struct of plain fields: never fails
		t := plannedTxn{
			cmps:  []clientv3.Cmp{leaderCmp, clientv3.Compare(clientv3.ModRevision(key), "=", s.prevRev)},
			ops:   []clientv3.Op{clientv3.OpPut(key, string(val))},
			descs: []string{s.String()},
		}
		if s.restart != nil {
			akey := AssignmentKey(prefix, *s.restart)
			t.cmps = append(t.cmps, clientv3.Compare(clientv3.ModRevision(akey), "=", s.restart.ModRevision))
			t.ops = append(t.ops, clientv3.OpDelete(akey))
			t.removes = 1
		}
		out = append(out, t)
	}
	return out
}

// describeSteps is the log line of a round's steps.
func describeSteps(steps []restartStep) string {
	parts := make([]string, len(steps))
	for i, s := range steps {
		parts[i] = s.String()
	}
	return strings.Join(parts, "; ")
}
