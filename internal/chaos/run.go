package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Config is one run.
type Config struct {
	Seed     uint64
	Members  int           // consumerd members, 3 to 5 (two zones)
	LeaseTTL time.Duration // the members' --etcd.lease-ttl
	// Extra is how many faults follow the one of each kind.
	Extra int
	// BatchLines is the lines published around each fault.
	BatchLines int
	// RecoverTimeout bounds the time from a heal to exact counts.
	RecoverTimeout time.Duration
	// Dir is where the run's data and logs go (a fresh directory is made
	// in it); a run with an anomaly keeps it, a clean run removes it.
	Dir  string
	Bins Binaries
	// Logf reports progress (nil: quiet).
	Logf func(format string, args ...any)
}

func (c *Config) defaults() {
	if c.Members == 0 {
		c.Members = 4
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 4 * time.Second
	}
	if c.BatchLines == 0 {
		c.BatchLines = 200
	}
	if c.RecoverTimeout == 0 {
		c.RecoverTimeout = 90 * time.Second
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// FaultResult is one fault of a run: how long after its heal the counts
// were exact again (zero when they never were, or the batch was not
// published: the anomalies say why), and what went wrong.
type FaultResult struct {
	Fault     Fault
	Recovered time.Duration
	Anomalies []string
}

// Report is a run's outcome.
type Report struct {
	Seed      uint64
	Faults    []FaultResult
	Lines     int
	Anomalies []string // every anomaly of the run, each naming its fault
	LogDir    string   // kept when there are anomalies
}

// Line is the run's one-line summary.
func (r Report) Line() string {
	byKind := map[Kind]int{}
	var rec []time.Duration
	for _, f := range r.Faults {
		byKind[f.Fault.Kind]++
		if f.Recovered > 0 { // only measured recoveries make the figures
			rec = append(rec, f.Recovered)
		}
	}
	var kinds []string
	for _, k := range Kinds {
		if byKind[k] > 0 {
			kinds = append(kinds, fmt.Sprintf("%s:%d", k, byKind[k]))
		}
	}
	slices.Sort(rec)
	p50, max := time.Duration(0), time.Duration(0)
	if len(rec) > 0 {
		p50, max = rec[(len(rec)-1)/2], rec[len(rec)-1]
	}
	s := fmt.Sprintf("CHAOS seed=%d faults=%d kinds=%d lines=%d anomalies=%d recover_p50=%s recover_max=%s by_kind=%s",
		r.Seed, len(r.Faults), len(kinds), r.Lines, len(r.Anomalies), p50.Round(10*time.Millisecond), max.Round(10*time.Millisecond), strings.Join(kinds, ","))
	if r.LogDir != "" {
		s += fmt.Sprintf(" logs=%s replay='make chaos SEEDS=%d'", r.LogDir, r.Seed)
	}
	return s
}

// Run builds the cluster, runs the workload through the seed's schedule of
// faults, checks the outcome and tears everything down. Anomalies are in
// the report; the error is for a run that could not be carried out (no
// network, a service that never started, an interrupt).
func Run(ctx context.Context, cfg Config) (rep Report, err error) {
	cfg.defaults()
	rep.Seed = cfg.Seed
	dir, err := os.MkdirTemp(cfg.Dir, fmt.Sprintf("chaos-seed%d-", cfg.Seed))
	if err != nil {
		return rep, err
	}
	defer func() {
		if err != nil || len(rep.Anomalies) > 0 {
			rep.LogDir = dir
			return
		}
		_ = os.RemoveAll(dir)
	}()
	c, err := startCluster(ctx, dir, cfg.Bins, cfg.Members, cfg.LeaseTTL)
	if err != nil {
		return rep, err
	}
	defer c.stop()
	cfg.Logf("seed %d: network %s up, %d members, logs in %s", cfg.Seed, c.net.id, cfg.Members, dir)
	if err := c.setup(ctx, cfg); err != nil {
		return rep, fmt.Errorf("setting up the pipeline: %w", err)
	}
	var lines []string
	batch := 0
	publish := func() error {
		b := batchLines(batch, cfg.BatchLines)
		if err := c.publishBatch(ctx, cfg.Seed, batch, b, cfg.Logf); err != nil {
			return err
		}
		lines = append(lines, b...)
		batch++
		return nil
	}
	if err := publish(); err != nil {
		return rep, fmt.Errorf("first batch: %w", err)
	}
	if problems := c.waitExact(ctx, model(lines), cfg.RecoverTimeout); problems != nil {
		return rep, fmt.Errorf("counts not exact before any fault: %s", strings.Join(problems, "; "))
	}
	for i, f := range Schedule(cfg.Seed, cfg.Members, cfg.LeaseTTL, cfg.Extra) {
		res := c.runFault(ctx, cfg, f, batch, &lines)
		batch++
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		for _, a := range res.Anomalies {
			rep.Anomalies = append(rep.Anomalies, fmt.Sprintf("fault %d (%s): %s", i+1, f, a))
		}
		rep.Faults = append(rep.Faults, res)
		cfg.Logf("seed %d fault %d %s: exact %s after heal, anomalies %d", cfg.Seed, i+1, f, res.Recovered.Round(time.Millisecond), len(res.Anomalies))
	}
	rep.Lines = len(lines)
	rep.Anomalies = append(rep.Anomalies, c.finalCheck(ctx, cfg, model(lines))...)
	c.mu.Lock()
	rep.Anomalies = append(rep.Anomalies, c.overruns...)
	c.mu.Unlock()
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	return rep, nil
}

// setup creates the pipeline's topics and shards (one hot standby each)
// and starts the members, waiting until every shard is PRIMARY.
func (c *cluster) setup(ctx context.Context, cfg Config) error {
	for _, t := range []string{"lines", "tokens", "totals"} {
		args := []string{"topics", "create", "--name", t, "--partitions", fmt.Sprint(pipelinePartitions)}
		if err := c.retryClient(ctx, time.Minute, args...); err != nil {
			return err
		}
	}
	for _, app := range []string{"split", "tally"} {
		if err := c.retryClient(ctx, time.Minute, "shards", "create", "--app", app, "--hot-standbys", "1"); err != nil {
			return err
		}
	}
	for _, m := range c.members {
		if err := m.start(c.net); err != nil {
			return err
		}
	}
	if problems := c.poll(ctx, 2*time.Minute, c.healthy); problems != nil {
		return fmt.Errorf("shards not all PRIMARY with standbys: %s", strings.Join(problems, "; "))
	}
	return nil
}

// retryClient runs a client command until it succeeds (etcd and NATS may
// still be electing leaders) or timeout passes.
func (c *cluster) retryClient(ctx context.Context, timeout time.Duration, args ...string) error {
	var err error
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err = c.client(ctx, 20*time.Second, nil, args...); err == nil {
			return nil
		}
		if sleep(ctx, 500*time.Millisecond) != nil {
			return ctx.Err()
		}
	}
	return err
}

// runFault publishes a batch while fault f is injected and held, heals it,
// and measures how long after the heal the counts are exact.
func (c *cluster) runFault(ctx context.Context, cfg Config, f Fault, batch int, lines *[]string) FaultResult {
	if f.Kind.loses() {
		return c.runLossFault(ctx, cfg, f, batch, lines)
	}
	res := FaultResult{Fault: f}
	b := batchLines(batch, cfg.BatchLines)
	published := make(chan error, 1)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { published <- c.publishBatch(pctx, cfg.Seed, batch, b, cfg.Logf) }() // joined below
	heal, err := c.inject(ctx, f)
	if err != nil {
		res.Anomalies = append(res.Anomalies, fmt.Sprintf("injecting: %v", err))
	}
	healed := time.Now()
	if heal != nil {
		if err := heal(ctx); err != nil {
			res.Anomalies = append(res.Anomalies, fmt.Sprintf("healing: %v", err))
		}
	}
	if err := <-published; err != nil {
		res.Anomalies = append(res.Anomalies, fmt.Sprintf("publishing: %v", err))
		return res
	}
	*lines = append(*lines, b...)
	if problems := c.waitExact(ctx, model(*lines), cfg.RecoverTimeout); problems != nil {
		res.Anomalies = append(res.Anomalies, fmt.Sprintf("counts not exact %s after the heal: %s", cfg.RecoverTimeout, strings.Join(problems, "; ")))
		return res
	}
	res.Recovered = time.Since(healed)
	return res
}

// waitExact polls tally's counts until they equal want; it returns the last
// differences when timeout passes first.
func (c *cluster) waitExact(ctx context.Context, want map[string]int64, timeout time.Duration) []string {
	return c.poll(ctx, timeout, func(ctx context.Context) []string { return c.talliesExact(ctx, want) })
}

// poll calls check until it returns nil or timeout passes; it returns the
// last problems.
func (c *cluster) poll(ctx context.Context, timeout time.Duration, check func(context.Context) []string) []string {
	deadline := time.Now().Add(timeout)
	for {
		problems := check(ctx)
		if problems == nil {
			return nil
		}
		if time.Now().After(deadline) || sleep(ctx, 250*time.Millisecond) != nil {
			return problems
		}
	}
}

// finalCheck is the end state once everything is healed: exact counts, the
// topics exact, every shard PRIMARY with its standbys, every member
// registered, and no service exited.
func (c *cluster) finalCheck(ctx context.Context, cfg Config, want map[string]int64) []string {
	var out []string
	if p := c.waitExact(ctx, want, cfg.RecoverTimeout); p != nil {
		out = append(out, "final counts: "+strings.Join(p, "; "))
	}
	out = append(out, c.topicsExact(ctx, want)...)
	if p := c.poll(ctx, cfg.RecoverTimeout, c.healthy); p != nil {
		out = append(out, "final shards: "+strings.Join(p, "; "))
	}
	for _, s := range append(append(append([]*service{}, c.members...), c.nats...), c.etcd...) {
		if !s.running() {
			out = append(out, fmt.Sprintf("%s is not running: %s (log %s)", s.name, s.exitState(), s.log))
		}
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// BuildBinaries builds consumerd and go.mod's nats-server into dir and finds
// etcd (Debian's etcd-server: `make deps`).
func BuildBinaries(ctx context.Context, dir string) (Binaries, error) {
	b := Binaries{Consumerd: filepath.Join(dir, "consumerd"), NatsServer: filepath.Join(dir, "nats-server"), StreamRm: filepath.Join(dir, "streamrm")}
	for path, pkg := range map[string]string{b.Consumerd: "github.com/consumerd/consumerd/cmd/consumerd", b.NatsServer: "github.com/nats-io/nats-server/v2",
		b.StreamRm: "github.com/consumerd/consumerd/internal/chaos/cmd/streamrm"} {
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", path, pkg).CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	}
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		for _, p := range []string{"/usr/bin/etcd", "/usr/local/bin/etcd"} {
			if _, serr := os.Stat(p); serr == nil {
				etcd, err = p, nil
				break
			}
		}
	}
	if err != nil {
		return b, errors.New("etcd not found: install Debian's etcd-server (make deps)")
	}
	b.Etcd = etcd
	return b, nil
}
