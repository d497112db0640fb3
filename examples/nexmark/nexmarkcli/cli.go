package nexmarkcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/daemon"
	"github.com/consumerd/consumerd/examples/nexmark"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
)

// Commands are the nexmark daemon's own client commands (cmd/nexmark):
// setup, generate and check. They take consumerd's connection flags.
func Commands() []daemon.Command {
	return []daemon.Command{setupCommand(), generateCommand(), checkCommand()}
}

// queryNames are the registered queries' names, in query order.
func queryNames() []string {
	var names []string
	for _, q := range nexmark.Queries() {
		names = append(names, q.Name)
	}
	return names
}

// selectQueries parses a --queries / --query value: "all", or names
// separated by commas. An unknown name is a usage error listing the valid
// ones.
func selectQueries(flag, value string) ([]nexmark.Query, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return nil, daemon.UsageError(fmt.Errorf("%s: give all or query names separated by commas (%s)", flag, strings.Join(queryNames(), ",")))
	}
	if value == "all" {
		return nexmark.Queries(), nil
	}
	var out []nexmark.Query
	for _, name := range strings.Split(value, ",") {
		name = strings.TrimSpace(name)
		q, ok := nexmark.Lookup(name)
		if !ok {
			return nil, daemon.UsageError(fmt.Errorf("%s: unknown query %q (this binary has: %s, or all)", flag, name, strings.Join(queryNames(), ", ")))
		}
		if !slices.ContainsFunc(out, func(o nexmark.Query) bool { return o.Name == q.Name }) {
			out = append(out, q)
		}
	}
	return out, nil
}

// setupFlags are setup's own flags.
type setupFlags struct {
	partitions, standbys int
	queries              string
}

func setupCommand() daemon.Command {
	var f setupFlags
	return daemon.Command{
		Use:   "setup [--partitions P] [--queries all|q0,q3,...] [--standbys N]",
		Short: "Create the Nexmark source topics and, for each query, its topics and shards",
		Long: `setup creates the source topics (` + strings.Join(nexmark.SourceTopics, ", ") + `) with P
partitions, and for each selected query the topics between and after its stages
(P partitions, or 1 for a stage that is a single partition by design) and the
shards of each stage: one per partition of the stage's first input topic, each
with N hot standbys. Re-running it with the same flags changes nothing; an
existing topic with another partition count is an error naming it (a topic's
partition count never changes: reset the cluster to change P). A different
--standbys updates the shard specs.`,
		Flags: func(fs *pflag.FlagSet) {
			fs.IntVar(&f.partitions, "partitions", nexmark.DefaultPartitions, "partitions of the source topics and of every query topic that is not single by design")
			fs.StringVar(&f.queries, "queries", "all", "queries to set up: all, or names separated by commas")
			fs.IntVar(&f.standbys, "standbys", 1, "hot standbys of every shard")
		},
		Check: func() error {
			if f.partitions < 1 || f.partitions > topic.MaxPartitions {
				return fmt.Errorf("--partitions: %d must be in 1..%d", f.partitions, topic.MaxPartitions)
			}
			if f.standbys < 0 || f.standbys > shard.MaxHotStandbys {
				return fmt.Errorf("--standbys: %d must be in 0..%d", f.standbys, shard.MaxHotStandbys)
			}
			_, err := selectQueries("--queries", f.queries)
			return err
		},
		Run: func(ctx context.Context, c *daemon.Client, stdout, _ io.Writer) error {
			qs, err := selectQueries("--queries", f.queries)
			if err != nil {
				return err
			}
			return setup(ctx, c, stdout, qs, f.partitions, f.standbys)
		},
	}
}

// setupPlan is what setup creates: topics in creation order, and specs.
type setupPlan struct {
	topics []topic.Description
	specs  []*shard.Spec
}

// planSetup lays out the topics and shard specs of qs over sources of n
// partitions. A stage's shard count is the partition count of its first
// input (App.Topics[0]), which must be a source topic or a topic of its
// query: a shard reads the same partition of each of its inputs.
func planSetup(qs []nexmark.Query, n, standbys int) (setupPlan, error) {
	var plan setupPlan
	parts := map[string]int{}
	add := func(d topic.Description, owner string) error {
		if have, ok := parts[d.Name]; ok {
			if have != d.Partitions {
				return fmt.Errorf("topic %s: %s wants %d partitions, another query %d", d.Name, owner, d.Partitions, have)
			}
			return nil
		}
		parts[d.Name] = d.Partitions
		plan.topics = append(plan.topics, d)
		return nil
	}
	for _, name := range nexmark.SourceTopics {
		if err := add(topic.Description{Name: name, Partitions: n}, "the generator"); err != nil {
			return plan, err
		}
	}
	for _, q := range qs {
		for _, t := range q.Topics {
			if err := add(topic.Description{Name: t.Name, Partitions: t.Partitions(n)}, q.Name); err != nil {
				return plan, err
			}
		}
	}
	for _, q := range qs {
		for _, app := range q.Stages {
			if len(app.Topics) == 0 {
				return plan, fmt.Errorf("query %s: stage %s reads no topic (a bug of the query)", q.Name, app.Name)
			}
			count, ok := parts[app.Topics[0]]
			if !ok {
				return plan, fmt.Errorf("query %s: stage %s reads topic %s, neither a source nor one of the query's topics (a bug of the query)", q.Name, app.Name, app.Topics[0])
			}
			specs, err := app.SpecsFor(count, standbys)
			if err != nil {
				return plan, fmt.Errorf("query %s: stage %s: %w", q.Name, app.Name, err)
			}
			plan.specs = append(plan.specs, specs...)
		}
	}
	return plan, nil
}

func setup(ctx context.Context, c *daemon.Client, stdout io.Writer, qs []nexmark.Query, n, standbys int) error {
	plan, err := planSetup(qs, n, standbys)
	if err != nil {
		return err
	}
	var created, existing []string
	for _, d := range plan.topics {
		made, err := c.CreateTopic(ctx, d)
		if err != nil {
			return fmt.Errorf("setup: %w (reset the cluster, or pass the --partitions it was set up with)", err)
		}
		if made {
			created = append(created, fmt.Sprintf("%s(%d)", d.Name, d.Partitions))
		} else {
			existing = append(existing, d.Name)
		}
	}
	applied, err := c.ApplySpecs(ctx, plan.specs)
	if err != nil {
		return fmt.Errorf("setup: shard specs: %w", err)
	}
	names := make([]string, len(qs))
	for i, q := range qs {
		names[i] = q.Name
	}
	fmt.Fprintf(stdout, "setup %s: topics %d created%s, %d unchanged; shards %d created, %d updated, %d unchanged\n",
		strings.Join(names, ","), len(created), orNone(created), len(existing), applied.Created, applied.Updated, applied.Unchanged)
	return nil
}

func orNone(ss []string) string {
	if len(ss) == 0 {
		return ""
	}
	return " (" + strings.Join(ss, " ") + ")"
}

// runRecord is a generate run as recorded in etcd (runKey): what check
// regenerates, and what a resumed generate must match.
type runRecord struct {
	Events   uint64  `json:"events"`
	Rate     float64 `json:"rate"`
	Seed     uint64  `json:"seed"`
	BaseTime int64   `json:"base_time"`
}

func (r runRecord) String() string {
	return fmt.Sprintf("--events %d --rate %v --seed %d (base time %d)", r.Events, r.Rate, r.Seed, r.BaseTime)
}

func (r runRecord) generator() nexmark.Generator {
	return nexmark.Generator{Seed: r.Seed, Rate: r.Rate, BaseTime: r.BaseTime}
}

// runKey is where the run is recorded.
func runKey(c *daemon.Client) string { return c.Prefix() + "/nexmark/run" }

// errNoRun is returned by loadRun when no run is recorded.
var errNoRun = errors.New("no nexmark run recorded")

// recordRun records r unless a run is recorded; a recorded run with other
// parameters is an error naming both. One txn, so two generates started
// together cannot both record theirs.
func recordRun(ctx context.Context, c *daemon.Client, r runRecord) error {
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	key := runKey(c)
	resp, err := c.Etcd().Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(raw))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("recording the run at %s in etcd: %w", key, err)
	}
	if resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return fmt.Errorf("the run record %s was deleted while recording this one; try again", key)
	}
	have, err := decodeRun(key, kvs[0].Value)
	if err != nil {
		return err
	}
	if have != r {
		return fmt.Errorf("this cluster already holds a run with other parameters (%s, at %s); this one is %s: pass the recorded values to resume it, or reset the cluster for a new run", have, key, r)
	}
	return nil
}

// loadRun reads the recorded run (errNoRun when there is none).
func loadRun(ctx context.Context, c *daemon.Client) (runRecord, error) {
	key := runKey(c)
	resp, err := c.Etcd().Get(ctx, key)
	if err != nil {
		return runRecord{}, fmt.Errorf("reading the run record %s from etcd: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return runRecord{}, fmt.Errorf("%w at %s (under --etcd.prefix %s): run 'nexmark generate' first", errNoRun, key, c.Prefix())
	}
	return decodeRun(key, resp.Kvs[0].Value)
}

func decodeRun(key string, raw []byte) (runRecord, error) {
	var r runRecord
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return runRecord{}, fmt.Errorf("run record %s: %w (reset the cluster)", key, err)
	}
	if err := r.generator().Validate(); err != nil || r.Events == 0 {
		return runRecord{}, fmt.Errorf("run record %s: %s: not a run generate records (reset the cluster)", key, raw)
	}
	return r, nil
}

// sourceTopics reads the source topics' descriptions, in SourceTopics
// order; a missing one says to run setup.
func sourceTopics(ctx context.Context, c *daemon.Client) ([]topic.Description, error) {
	var out []topic.Description
	for _, name := range nexmark.SourceTopics {
		d, err := c.Topic(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("source topic %s: %w (run 'nexmark setup' first)", name, err)
		}
		out = append(out, d)
	}
	return out, nil
}
