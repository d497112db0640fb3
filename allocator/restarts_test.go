package allocator

import (
	"strings"
	"testing"
	"time"
)

// policyItem is an item with a restart policy.
type policyItem struct {
	genericItem
	p  RestartPolicy
	ok bool
}

func (i policyItem) RestartPolicy() (RestartPolicy, bool) { return i.p, i.ok }

func TestRestartBackoff(t *testing.T) {
	p := RestartPolicy{MaxAttempts: 10, InitialBackoff: time.Second, MaxBackoff: 5 * time.Second}
	var got []string
	for i := 0; i < 5; i++ {
		got = append(got, p.backoff(i).String())
	}
	if s := strings.Join(got, " "); s != "1s 2s 4s 5s 5s" {
		t.Fatalf("backoffs %s, want 1s 2s 4s 5s 5s", s)
	}
}

// TestPlanRestarts walks one item through its failures: scheduled, due,
// restarted, failed again (a longer wait), and given up on at the limit.
func TestPlanRestarts(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := RestartPolicy{MaxAttempts: 2, InitialBackoff: time.Second, MaxBackoff: time.Minute}
	snap := Snapshot{
		Items: map[string]ItemInfo{
			"a":      {ID: "a", Item: policyItem{genericItem{HotStandbys: 1}, p, true}},
			"manual": {ID: "manual", Item: genericItem{}},
		},
		Assignments: []Assignment{
			{Item: "a", Zone: "z", Member: "m2", Slot: 1, Status: ReplicaStatus{State: StateFailed, Error: "standby broke"}, ModRevision: 11},
			{Item: "a", Zone: "z", Member: "m1", Slot: 0, Status: ReplicaStatus{State: StateFailed, Error: "boom"}, ModRevision: 10},
			{Item: "manual", Zone: "z", Member: "m1", Slot: 0, Status: ReplicaStatus{State: StateFailed}, ModRevision: 12},
		},
	}
	one := func(now time.Time) (restartStep, time.Time) {
		t.Helper()
		steps, wake := planRestarts(snap, now)
		if len(steps) != 1 {
			t.Fatalf("at %s: steps %v, want one (the item without a policy never gets one)", now.Sub(t0), steps)
		}
		return steps[0], wake
	}
	apply := func(s restartStep, rev int64) {
		s.rec.ModRevision = rev
		if snap.Restarts == nil {
			snap.Restarts = map[string]RestartRecord{}
		}
		snap.Restarts[s.item] = s.rec
	}

	// First failure: scheduled a second out, on the lowest failed slot.
	s, wake := one(t0)
	if s.restart != nil || s.rec.Failure != 10 || s.rec.Attempts != 0 || !s.rec.NotBefore.Equal(t0.Add(time.Second)) || !wake.Equal(s.rec.NotBefore) || s.rec.Error != "boom" || s.prevRev != 0 {
		t.Fatalf("first failure: %+v wake %s", s, wake)
	}
	apply(s, 20)
	// Not due yet: nothing to write, wake at the scheduled time.
	if steps, wake := planRestarts(snap, t0.Add(500*time.Millisecond)); len(steps) != 0 || !wake.Equal(t0.Add(time.Second)) {
		t.Fatalf("before due: %v wake %s", steps, wake)
	}
	// Due: the assignment key goes, attempts count it.
	s, _ = one(t0.Add(time.Second))
	if s.restart == nil || s.restart.ModRevision != 10 || s.rec.Attempts != 1 || s.prevRev != 20 || !s.rec.LastRestart.Equal(t0.Add(time.Second)) {
		t.Fatalf("due: %+v", s)
	}
	apply(s, 21)
	// It failed again (a new key revision): the wait doubles.
	snap.Assignments[1].ModRevision = 30
	s, _ = one(t0.Add(3 * time.Second))
	if s.restart != nil || s.rec.Attempts != 1 || !s.rec.NotBefore.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("second failure: %+v", s)
	}
	apply(s, 31)
	s, _ = one(t0.Add(5 * time.Second))
	if s.restart == nil || s.rec.Attempts != 2 {
		t.Fatalf("second restart: %+v", s)
	}
	apply(s, 32)
	// A third failure finds the attempts used up: given up on, for good.
	snap.Assignments[1].ModRevision = 40
	s, wake = one(t0.Add(6 * time.Second))
	if !s.rec.Exhausted || s.restart != nil || !wake.IsZero() || !strings.Contains(s.String(), "give up on a: 2 restarts done (max 2)") {
		t.Fatalf("exhausted: %+v (%s) wake %s", s, s, wake)
	}
	apply(s, 41)
	if steps, wake := planRestarts(snap, t0.Add(time.Hour)); len(steps) != 0 || !wake.IsZero() {
		t.Fatalf("after giving up: %v wake %s", steps, wake)
	}
	// A failure long after the last restart starts the count over.
	snap.Assignments[1].ModRevision = 50
	s, _ = one(t0.Add(5*time.Second + RestartResetAfter + time.Second))
	if s.rec.Exhausted || s.rec.Attempts != 0 {
		t.Fatalf("after the reset period: %+v", s)
	}
}
