package chaos

import (
	"context"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestChaosShort is `make test`'s chaos run: one fixed seed, every fault
// kind once, on the production binaries in network namespaces. It needs
// root (ip netns) and Debian's etcd; elsewhere it skips, saying why.
// `make chaos` runs more seeds.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the chaos run takes about two minutes")
	}
	if err := CanRun(); err != nil {
		t.Skipf("chaos run skipped: %v", err)
	}
	// An interrupt (Ctrl-C on go test) cancels the run, which tears its
	// network down before the test binary exits.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 6*time.Minute) // a bound on a hung run, not a measurement
	defer cancel()
	bins, err := BuildBinaries(ctx, t.TempDir())
	if err != nil {
		if strings.Contains(err.Error(), "etcd not found") {
			t.Skipf("chaos run skipped: %v", err)
		}
		t.Fatal(err)
	}
	rep, err := Run(ctx, Config{Seed: 7, Bins: bins, Dir: os.TempDir(), Logf: t.Logf})
	t.Log(rep.Line())
	if err != nil {
		t.Fatalf("chaos run: %v (logs in %s)", err, rep.LogDir)
	}
	for _, a := range rep.Anomalies {
		t.Errorf("anomaly: %s", a)
	}
	if len(rep.Faults) < len(Kinds) {
		t.Fatalf("%d faults injected, want every one of the %d kinds", len(rep.Faults), len(Kinds))
	}
	if t.Failed() {
		t.Logf("every host's log is in %s; replay with: make chaos SEEDS=7", rep.LogDir)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
