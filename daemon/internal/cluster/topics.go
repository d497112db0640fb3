package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
)

// TopicSet is every topic record under a root; bad holds the records that do
// not decode (reported, never dropped silently).
type TopicSet struct {
	ByName map[string]topic.Description
	Bad    []error
}

func (ts TopicSet) Names() []string {
	out := make([]string, 0, len(ts.ByName))
	for n := range ts.ByName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// LoadTopics reads every topic record under root.
func LoadTopics(ctx context.Context, cli *clientv3.Client, root string) (TopicSet, error) {
	resp, err := cli.Get(ctx, topic.KeyPrefix(root), clientv3.WithPrefix())
	if err != nil {
		return TopicSet{}, fmt.Errorf("reading topics from etcd (%s): %w", topic.KeyPrefix(root), err)
	}
	ts := TopicSet{ByName: map[string]topic.Description{}}
	for _, kv := range resp.Kvs {
		d, err := topic.DecodeRecord(root, string(kv.Key), kv.Value)
		if err != nil {
			ts.Bad = append(ts.Bad, err)
			continue
		}
		ts.ByName[d.Name] = d
	}
	return ts, nil
}

// GetTopic reads one topic record; an unknown topic is an error naming the
// topics there are and how to create it.
func GetTopic(ctx context.Context, cli *clientv3.Client, root, name string) (topic.Description, error) {
	d, err := shard.EtcdTopics(cli, root)(ctx, name)
	if errors.Is(err, shard.ErrTopicNotFound) {
		known := "-"
		if ts, lerr := LoadTopics(ctx, cli, root); lerr == nil && len(ts.ByName) > 0 {
			known = strings.Join(ts.Names(), ", ")
		}
		return topic.Description{}, fmt.Errorf("topic %q does not exist (topics: %s); create it with 'consumerd topics create --name %s --partitions N'", name, known, name)
	}
	return d, err
}

// ErrTopicChange refuses a different partition count for an existing topic.
var ErrTopicChange = errors.New("a topic's partition count never changes (it would re-route every key)")

// CreateTopic writes d unless the topic exists. An existing topic with the
// same partition count is left as it is (created false); one with another
// count is an error naming both.
func CreateTopic(ctx context.Context, cli *clientv3.Client, root string, d topic.Description) (created bool, err error) {
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
		return false, fmt.Errorf("topic %s exists with %d partitions; refusing %d: %w", d.Name, have.Partitions, d.Partitions, ErrTopicChange)
	}
	return false, nil
}

// UnreadPartitions lists, per topic that some shard reads, the partitions no
// shard reads: what a deleted or missing shard leaves behind. A topic no
// shard reads at all (an app's output, read by tools or another cluster) is
// not listed.
func UnreadPartitions(ts TopicSet, specs []*shard.Spec) map[string][]int {
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
func WarnUnread(w io.Writer, ts TopicSet, specs []*shard.Spec) {
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
func AppPartitions(ctx context.Context, cli *clientv3.Client, root string, app shard.App) (int, error) {
	n, first := 0, ""
	for _, t := range app.Topics {
		d, err := GetTopic(ctx, cli, root, t)
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
func CheckSources(ts TopicSet, specs []*shard.Spec) error {
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
	for _, t := range append(append([]string{}, app.Topics...), app.Outputs...) {
		created, err := CreateTopic(ctx, cli, root, topic.Description{Name: t, Partitions: partitions})
		if err != nil && !errors.Is(err, ErrTopicChange) {
			return topics, 0, err
		}
		if created {
			topics = append(topics, t)
		}
	}
	n, err := AppPartitions(ctx, cli, root, app)
	if err != nil {
		return topics, 0, err
	}
	shards, err = ensureShards(ctx, cli, root, app, n)
	return topics, shards, err
}
