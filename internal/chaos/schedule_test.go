package chaos

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestSchedule runs testdata/schedule: "schedule seed=S members=M lease=D
// extra=E" prints the run's faults, one per line.
func TestSchedule(t *testing.T) {
	datadriven.RunTest(t, "testdata/schedule", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "schedule" {
			d.Fatalf(t, "unknown command %q", d.Cmd)
		}
		var seed uint64
		var members, extra int
		var lease string
		d.ScanArgs(t, "seed", &seed)
		d.ScanArgs(t, "members", &members)
		d.ScanArgs(t, "lease", &lease)
		d.ScanArgs(t, "extra", &extra)
		ttl, err := time.ParseDuration(lease)
		if err != nil {
			d.Fatalf(t, "lease: %v", err)
		}
		var b strings.Builder
		for _, f := range Schedule(seed, members, ttl, extra) {
			fmt.Fprintln(&b, f)
		}
		return b.String()
	})
}

// TestScheduleProperties: for many seeds, every kind is scheduled, targets
// are in range, a MemberStop outlasts the lease, and the same seed gives
// the same schedule.
func TestScheduleProperties(t *testing.T) {
	const lease = 4 * time.Second
	for seed := uint64(0); seed < 200; seed++ {
		members := 3 + int(seed%3)
		fs := Schedule(seed, members, lease, int(seed%4))
		if len(fs) != len(Kinds)+int(seed%4) {
			t.Fatalf("seed %d: %d faults, want %d", seed, len(fs), len(Kinds)+int(seed%4))
		}
		seen := map[Kind]bool{}
		for _, f := range fs {
			seen[f.Kind] = true
			limit := f.Kind.targets(members)
			if f.Target < 0 || f.Target >= limit {
				t.Fatalf("seed %d: %s targets %d of %d", seed, f, f.Target, limit)
			}
			if f.Kind == MemberStop && f.Hold <= lease {
				t.Fatalf("seed %d: %s does not outlast the %s lease", seed, f, lease)
			}
			if f.Kind == MemberFlap && (len(f.Flaps) < 6 || len(f.Flaps)%2 != 0) {
				t.Fatalf("seed %d: %s has flaps %v", seed, f, f.Flaps)
			}
		}
		for _, k := range Kinds {
			if !seen[k] {
				t.Fatalf("seed %d: no %s fault", seed, k)
			}
		}
		if again := Schedule(seed, members, lease, int(seed%4)); !slices.EqualFunc(fs, again, func(a, b Fault) bool { return a.String() == b.String() && slices.Equal(a.Flaps, b.Flaps) }) {
			t.Fatalf("seed %d: two schedules differ", seed)
		}
	}
}
