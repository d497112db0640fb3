package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
)

// Topic records are topic.Registry's: these are the cluster-wide checks
// built on them.

// UnreadPartitions lists, per topic that some shard reads, the partitions no
// shard reads: what a deleted or missing shard leaves behind. A topic no
// shard reads at all (an app's output, read by tools or another cluster) is
// not listed.
func UnreadPartitions(ts topic.Set, specs []*shard.Spec) map[string][]int {
	read := map[topic.Partition]bool{}
	readTopic := map[string]bool{}
	for _, s := range specs {
		for _, src := range s.Sources {
			read[topic.Partition{Topic: src.Topic, Index: src.Partition}] = true
			readTopic[src.Topic] = true
		}
	}
	out := map[string][]int{}
	for name, d := range ts.ByName {
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

// WarnUnread writes one line per topic with unread partitions, and one per
// topic record that does not decode.
func WarnUnread(w io.Writer, ts topic.Set, specs []*shard.Spec) {
	for _, err := range ts.Bad {
		fmt.Fprintf(w, "WARNING: %v\n", err)
	}
	unread := UnreadPartitions(ts, specs)
	names := make([]string, 0, len(unread))
	for n := range unread {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "WARNING: topic %s: no shard reads partition(s) %s of %d: messages published there are never consumed\n",
			n, PartitionList(unread[n]), ts.ByName[n].Partitions)
	}
}

// PartitionList renders partition indexes compactly: "0,3-5,9".
func PartitionList(ps []int) string {
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

// AppPartitions is the partition count shared by every topic app reads: a
// shard made by `shards create` reads partition i of each. A topic missing,
// or two with different counts, is an error naming them.
func AppPartitions(ctx context.Context, topics *topic.Registry, app shard.App) (int, error) {
	n, first := 0, ""
	for _, t := range app.Topics {
		d, err := topics.Get(ctx, t)
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

// CheckSources checks that every source of specs names an existing topic and
// one of its partitions: a shard reading a partition that does not exist
// would never get a message.
func CheckSources(ts topic.Set, specs []*shard.Spec) error {
	for _, s := range specs {
		for i, src := range s.Sources {
			d, ok := ts.ByName[src.Topic]
			if !ok {
				return fmt.Errorf("shard %s: sources[%d]: topic %q does not exist (topics: %s); create it with 'consumerd topics create'",
					s.ID, i, src.Topic, cmdline.OrDash(strings.Join(ts.Names(), ", ")))
			}
			if src.Partition >= d.Partitions {
				return fmt.Errorf("shard %s: sources[%d]: topic %s has %d partitions (0..%d); partition %d does not exist",
					s.ID, i, src.Topic, d.Partitions, d.Partitions-1, src.Partition)
			}
		}
	}
	return nil
}

// EnsureApp sets up app on the embedded default: its input and output topics
// (partitions each, unless they exist: an existing topic keeps its count) and,
// when the app has no shard yet, one shard per partition. It returns the
// topics and the number of shards it created.
func EnsureApp(ctx context.Context, cli *clientv3.Client, root string, app shard.App, partitions int) (topics []string, shards int, err error) {
	reg := &topic.Registry{Client: cli, Prefix: root}
	for _, t := range append(append([]string{}, app.Topics...), app.Outputs...) {
		created, err := reg.Create(ctx, topic.Description{Name: t, Partitions: partitions})
		if err != nil && !errors.Is(err, topic.ErrPartitionsChange) {
			return topics, 0, err
		}
		if created {
			topics = append(topics, t)
		}
	}
	n, err := AppPartitions(ctx, reg, app)
	if err != nil {
		return topics, 0, err
	}
	shards, err = ensureShards(ctx, cli, root, app, n)
	return topics, shards, err
}

// Publishers are the shards whose app publishes to topic name (App.Outputs
// of apps, the binary's apps by name), sorted as specs are.
func Publishers(specs []*shard.Spec, apps map[string]shard.App, name string) []string {
	var out []string
	for _, s := range specs {
		if slices.Contains(apps[s.App].Outputs, name) {
			out = append(out, s.ID)
		}
	}
	return out
}
