// Command chaos runs consumerd's chaos harness (package internal/chaos): for
// each seed, a cluster of network namespaces with a 3-node etcd, a 3-node
// JetStream cluster and consumerd members, the seed's schedule of faults, and
// the exactly-once checker. It prints one CHAOS line per seed and exits 1 if
// any run had an anomaly (its logs are kept in the directory the line
// names). It needs root (ip netns). `make chaos` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/consumerd/consumerd/internal/chaos"
)

func main() {
	seeds := flag.String("seeds", "1,2,3", "comma-separated seeds: one run each")
	members := flag.Int("members", 4, "consumerd members per run (3 to 5, two zones)")
	lease := flag.Duration("lease-ttl", 4*time.Second, "the members' --etcd.lease-ttl")
	extra := flag.Int("extra", 0, "faults per run beyond one of each kind")
	dir := flag.String("dir", os.TempDir(), "directory for each run's data and logs (kept when a run has an anomaly)")
	quiet := flag.Bool("quiet", false, "print only the CHAOS lines")
	flag.Parse()
	if err := run(*seeds, *members, *lease, *extra, *dir, *quiet); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

func run(seedList string, members int, lease time.Duration, extra int, dir string, quiet bool) error {
	var seeds []uint64
	for _, s := range strings.Split(seedList, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return fmt.Errorf("--seeds: %q is not a seed (a non-negative integer)", s)
		}
		seeds = append(seeds, n)
	}
	if members < 3 || members > 5 {
		return fmt.Errorf("--members %d: must be 3 to 5", members)
	}
	if lease < time.Second {
		return fmt.Errorf("--lease-ttl %s: must be at least 1s", lease)
	}
	if err := chaos.CanRun(); err != nil {
		return err
	}
	// An interrupt cancels the run, which then tears its network down.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bindir, err := os.MkdirTemp("", "consumerd-chaos-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bindir)
	bins, err := chaos.BuildBinaries(ctx, bindir)
	if err != nil {
		return err
	}
	logf := func(format string, args ...any) {
		if !quiet {
			fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
		}
	}
	failed := 0
	for _, seed := range seeds {
		start := time.Now()
		rep, err := chaos.Run(ctx, chaos.Config{Seed: seed, Members: members, LeaseTTL: lease, Extra: extra, Dir: dir, Bins: bins, Logf: logf})
		if err != nil {
			return fmt.Errorf("seed %d: %w (logs in %s)", seed, err, rep.LogDir)
		}
		fmt.Printf("%s took=%s\n", rep.Line(), time.Since(start).Round(time.Second))
		for _, a := range rep.Anomalies {
			fmt.Printf("  anomaly: %s\n", a)
		}
		if len(rep.Anomalies) > 0 {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d runs had anomalies", failed, len(seeds))
	}
	return nil
}
