package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/internal/ident"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
)

// Topics live in etcd at <root>/topics/<name> (topic.Key): the one place a
// topic's partition count comes from.

// topicSet is every topic record under a root; bad holds the records that do
// not decode (reported, never dropped silently).
type topicSet struct {
	byName map[string]topic.Description
	bad    []error
}

func (ts topicSet) names() []string {
	out := make([]string, 0, len(ts.byName))
	for n := range ts.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// loadTopics reads every topic record under root.
func loadTopics(ctx context.Context, cli *clientv3.Client, root string) (topicSet, error) {
	resp, err := cli.Get(ctx, topic.KeyPrefix(root), clientv3.WithPrefix())
	if err != nil {
		return topicSet{}, fmt.Errorf("reading topics from etcd (%s): %w", topic.KeyPrefix(root), err)
	}
	ts := topicSet{byName: map[string]topic.Description{}}
	for _, kv := range resp.Kvs {
		d, err := topic.DecodeRecord(root, string(kv.Key), kv.Value)
		if err != nil {
			ts.bad = append(ts.bad, err)
			continue
		}
		ts.byName[d.Name] = d
	}
	return ts, nil
}

// getTopic reads one topic record; an unknown topic is an error naming the
// topics there are and how to create it.
func getTopic(ctx context.Context, cli *clientv3.Client, root, name string) (topic.Description, error) {
	d, err := shard.EtcdTopics(cli, root)(ctx, name)
	if errors.Is(err, shard.ErrTopicNotFound) {
		known := "-"
		if ts, lerr := loadTopics(ctx, cli, root); lerr == nil && len(ts.byName) > 0 {
			known = strings.Join(ts.names(), ", ")
		}
		return topic.Description{}, fmt.Errorf("topic %q does not exist (topics: %s); create it with 'consumerd topics create --name %s --partitions N'", name, known, name)
	}
	return d, err
}

// errTopicChange refuses a different partition count for an existing topic.
var errTopicChange = errors.New("a topic's partition count never changes (it would re-route every key)")

// createTopic writes d unless the topic exists. An existing topic with the
// same partition count is left as it is (created false); one with another
// count is an error naming both.
func createTopic(ctx context.Context, cli *clientv3.Client, root string, d topic.Description) (created bool, err error) {
	if err := d.Validate(); err != nil {
		return false, err
	}
	key := topic.Key(root, d.Name)
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(d.Encode()))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return false, fmt.Errorf("writing topic %s to etcd: %w", d.Name, err)
	}
	if resp.Succeeded {
		return true, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return false, fmt.Errorf("topic %s: created and deleted concurrently; try again", d.Name)
	}
	have, err := topic.DecodeRecord(root, key, kvs[0].Value)
	if err != nil {
		return false, err
	}
	if have.Partitions != d.Partitions {
		return false, fmt.Errorf("topic %s exists with %d partitions; refusing %d: %w", d.Name, have.Partitions, d.Partitions, errTopicChange)
	}
	return false, nil
}

// unreadPartitions lists, per topic that some shard reads, the partitions no
// shard reads: what a deleted or missing shard leaves behind. A topic no
// shard reads at all (an app's output, read by tools or another cluster) is
// not listed.
func unreadPartitions(ts topicSet, specs []*shard.Spec) map[string][]int {
	read := map[topic.Partition]bool{}
	readTopic := map[string]bool{}
	for _, s := range specs {
		for _, src := range s.Sources {
			read[topic.Partition{Topic: src.Topic, Index: src.Partition}] = true
			readTopic[src.Topic] = true
		}
	}
	out := map[string][]int{}
	for name, d := range ts.byName {
		if !readTopic[name] {
			continue
		}
		for p := 0; p < d.Partitions; p++ {
			if !read[topic.Partition{Topic: name, Index: p}] {
				out[name] = append(out[name], p)
			}
		}
	}
	return out
}

// warnUnread writes one line per topic with unread partitions, and one per
// topic record that does not decode.
func warnUnread(w io.Writer, ts topicSet, specs []*shard.Spec) {
	for _, err := range ts.bad {
		fmt.Fprintf(w, "WARNING: %v\n", err)
	}
	unread := unreadPartitions(ts, specs)
	names := make([]string, 0, len(unread))
	for n := range unread {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "WARNING: topic %s: no shard reads partition(s) %s of %d: messages published there are never consumed\n",
			n, partitionList(unread[n]), ts.byName[n].Partitions)
	}
}

// partitionList renders partition indexes compactly: "0,3-5,9".
func partitionList(ps []int) string {
	var b strings.Builder
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ps[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(ps[j]))
		}
		i = j + 1
	}
	return b.String()
}

func newTopicsCommand(opts Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topics",
		Short: "Create, list and delete topics",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newTopicsCreateCommand(), newTopicsListCommand(opts), newTopicsDeleteCommand(opts))
	return cmd
}

func newTopicsCreateCommand() *cobra.Command {
	var cf clientFlags
	var name string
	var partitions int
	cmd := &cobra.Command{
		Use:   "create --name T --partitions N",
		Short: "Create topic T with N partitions (1.." + strconv.Itoa(topic.MaxPartitions) + "); N never changes",
		Long: `create writes topic T's record to etcd (<prefix>/topics/T). publish routes a key to
partition hash(key) mod N, and 'shards create' makes one shard per partition. A
topic's partition count never changes: creating an existing topic with the same
count does nothing, with another count is an error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d := topic.Description{Name: name, Partitions: partitions}
			if err := d.Validate(); err != nil {
				return usagef("%v", err)
			}
			cli, err := cf.etcd(cmd.Context())
			if err != nil {
				return err
			}
			defer cli.Close()
			created, err := createTopic(cmd.Context(), cli, cf.etcdPrefix, d)
			if err != nil {
				return err
			}
			if created {
				fmt.Fprintf(cmd.OutOrStdout(), "created topic %s with %d partitions\n", name, partitions)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "topic %s exists with %d partitions: unchanged\n", name, partitions)
			}
			return nil
		},
	}
	cf.bind(cmd.Flags())
	cmd.Flags().StringVar(&name, "name", "", "topic name (required)")
	cmd.Flags().IntVar(&partitions, "partitions", 0, "number of partitions (required)")
	_ = cmd.MarkFlagRequired("name")
	_ = cmd.MarkFlagRequired("partitions")
	return cmd
}

// TopicRow is one topic of `topics list -o json`.
type TopicRow struct {
	Name       string `json:"name"`
	Partitions int    `json:"partitions"`
	// Messages is the number of messages stored in each partition (null when
	// NATS could not be asked).
	Messages []int64 `json:"messages"`
	// Unread are the partitions no shard reads.
	Unread []int `json:"unread"`
}

func newTopicsListCommand(opts Options) *cobra.Command {
	var cf clientFlags
	var output string
	cmd := &cobra.Command{
		Use:   "list [-o table|json]",
		Short: "List topics: partitions, stored messages per partition, partitions no shard reads",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validateOutput(output); err != nil {
				return err
			}
			ctx := cmd.Context()
			cli, snap, err := cf.snapshot(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			ts, err := loadTopics(ctx, cli, cf.etcdPrefix)
			if err != nil {
				return err
			}
			unread := unreadPartitions(ts, shard.Specs(snap))
			rows := make([]TopicRow, 0, len(ts.byName))
			for _, n := range ts.names() {
				rows = append(rows, TopicRow{Name: n, Partitions: ts.byName[n].Partitions, Unread: append([]int{}, unread[n]...)})
			}
			warn := cmd.ErrOrStderr()
			if len(rows) > 0 {
				if err := countMessages(ctx, cf, rows); err != nil {
					fmt.Fprintf(warn, "WARNING: stored message counts unavailable: %v\n", err)
				}
			}
			for _, err := range ts.bad {
				fmt.Fprintf(warn, "WARNING: %v\n", err)
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), rows)
			}
			return writeTopicTable(cmd.OutOrStdout(), rows)
		},
	}
	cf.bind(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

// countMessages fills each row's Messages from the WAL.
func countMessages(ctx context.Context, cf clientFlags, rows []TopicRow) error {
	opener, err := cf.openWAL(hclog.NewNullLogger())
	if err != nil {
		return err
	}
	defer opener.Close()
	for i := range rows {
		counts := make([]int64, rows[i].Partitions)
		for p := range counts {
			n, err := countChannel(ctx, opener, topic.ChannelName(rows[i].Name, p))
			if err != nil {
				return err
			}
			counts[p] = n
		}
		rows[i].Messages = counts
	}
	return nil
}

func countChannel(ctx context.Context, opener wal.Opener, ch string) (int64, error) {
	w, err := opener.Open(ctx, &wal.OpenOption{Channel: ch})
	if err != nil {
		return 0, err
	}
	defer w.Close()
	c, ok := w.(wal.Counter)
	if !ok {
		return 0, fmt.Errorf("channel %s: this WAL does not count messages: %w", ch, errors.ErrUnsupported)
	}
	n, err := c.Count(ctx)
	return int64(n), err
}

func writeTopicTable(w io.Writer, rows []TopicRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tMESSAGES\tUNREAD")
	for _, r := range rows {
		msgs := "-"
		if r.Messages != nil {
			var total int64
			parts := make([]string, len(r.Messages))
			for i, n := range r.Messages {
				total += n
				parts[i] = strconv.FormatInt(n, 10)
			}
			msgs = fmt.Sprintf("%d (%s)", total, strings.Join(parts, ","))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", r.Name, r.Partitions, msgs, orDash(partitionList(r.Unread)))
	}
	return tw.Flush()
}

func newTopicsDeleteCommand(opts Options) *cobra.Command {
	var cf clientFlags
	var name string
	var force bool
	cmd := &cobra.Command{
		Use:   "delete --name T [--force]",
		Short: "Delete topic T and every message stored in it (refused while a shard reads T, unless --force)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := ident.Check(name); err != nil {
				return usagef("--name: %v", err)
			}
			ctx := cmd.Context()
			cli, snap, err := cf.snapshot(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			d, err := getTopic(ctx, cli, cf.etcdPrefix, name)
			if err != nil {
				return err
			}
			var readers []string
			for _, s := range shard.Specs(snap) {
				for _, src := range s.Sources {
					if src.Topic == name {
						readers = append(readers, s.ID)
						break
					}
				}
			}
			if len(readers) > 0 && !force {
				return fmt.Errorf("topic %s is read by %d shard(s) (%s); delete those shards first, or give --force (their primaries then fail to read it)",
					name, len(readers), strings.Join(firstN(readers, 5), ", "))
			}
			opener, err := cf.openWAL(hclog.NewNullLogger())
			if err != nil {
				return err
			}
			defer opener.Close()
			rm, ok := opener.(wal.ChannelRemover)
			if !ok {
				return fmt.Errorf("this WAL cannot remove channels: %w", errors.ErrUnsupported)
			}
			// Data first: a record left behind is recreated by the next
			// delete; streams left behind would greet a re-created topic.
			for p := 0; p < d.Partitions; p++ {
				if err := rm.RemoveChannel(ctx, topic.ChannelName(name, p)); err != nil {
					return fmt.Errorf("deleting topic %s: %w", name, err)
				}
			}
			if _, err := cli.Delete(ctx, topic.Key(cf.etcdPrefix, name)); err != nil {
				return fmt.Errorf("deleting topic %s's record from etcd: %w", name, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted topic %s (%d partitions)\n", name, d.Partitions)
			return nil
		},
	}
	cf.bind(cmd.Flags())
	cmd.Flags().StringVar(&name, "name", "", "topic to delete (required)")
	cmd.Flags().BoolVar(&force, "force", false, "delete even while shards read the topic")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

// firstN returns the first n of ss, with "..." when there are more.
func firstN(ss []string, n int) []string {
	if len(ss) <= n {
		return ss
	}
	return append(append([]string{}, ss[:n]...), fmt.Sprintf("... %d more", len(ss)-n))
}

// appPartitions is the partition count shared by every topic app reads: a
// shard made by `shards create` reads partition i of each. A topic missing,
// or two with different counts, is an error naming them.
func appPartitions(ctx context.Context, cli *clientv3.Client, root string, app shard.App) (int, error) {
	n, first := 0, ""
	for _, t := range app.Topics {
		d, err := getTopic(ctx, cli, root, t)
		if err != nil {
			return 0, fmt.Errorf("app %s reads topic %s: %w", app.Name, t, err)
		}
		if first != "" && d.Partitions != n {
			return 0, fmt.Errorf("app %s reads topics %s (%d partitions) and %s (%d): a shard reads the same partition of each, so they need the same count",
				app.Name, first, n, t, d.Partitions)
		}
		n, first = d.Partitions, t
	}
	return n, nil
}

// checkSources checks that every source of specs names an existing topic and
// one of its partitions: a shard reading a partition that does not exist
// would never get a message.
func checkSources(ts topicSet, specs []*shard.Spec) error {
	for _, s := range specs {
		for i, src := range s.Sources {
			d, ok := ts.byName[src.Topic]
			if !ok {
				return fmt.Errorf("shard %s: sources[%d]: topic %q does not exist (topics: %s); create it with 'consumerd topics create'",
					s.ID, i, src.Topic, orDash(strings.Join(ts.names(), ", ")))
			}
			if src.Partition >= d.Partitions {
				return fmt.Errorf("shard %s: sources[%d]: topic %s has %d partitions (0..%d); partition %d does not exist",
					s.ID, i, src.Topic, d.Partitions, d.Partitions-1, src.Partition)
			}
		}
	}
	return nil
}

// ensureApp sets up app on the embedded default: its input and output topics
// (partitions each, unless they exist: an existing topic keeps its count) and,
// when the app has no shard yet, one shard per partition. It returns the
// topics and the number of shards it created.
func ensureApp(ctx context.Context, cli *clientv3.Client, root string, app shard.App, partitions int) (topics []string, shards int, err error) {
	for _, t := range append(append([]string{}, app.Topics...), app.Outputs...) {
		created, err := createTopic(ctx, cli, root, topic.Description{Name: t, Partitions: partitions})
		if err != nil && !errors.Is(err, errTopicChange) {
			return topics, 0, err
		}
		if created {
			topics = append(topics, t)
		}
	}
	n, err := appPartitions(ctx, cli, root, app)
	if err != nil {
		return topics, 0, err
	}
	shards, err = ensureShards(ctx, cli, root, app, n)
	return topics, shards, err
}
