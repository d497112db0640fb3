package shard

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/topic"
)

// ErrTopicNotFound is wrapped by a topic lookup of a topic with no record.
var ErrTopicNotFound = errors.New("topic does not exist")

// EtcdTopics is the topic lookup of Config.Topics that reads the topic
// records under root (topic.Key), as the daemon and the CLI do.
func EtcdTopics(cli *clientv3.Client, root string) func(ctx context.Context, name string) (topic.Description, error) {
	return func(ctx context.Context, name string) (topic.Description, error) {
		key := topic.Key(root, name)
		resp, err := cli.Get(ctx, key)
		if err != nil {
			// etcd's unavailability is not the shard's fault: transient.
			return topic.Description{}, markTransient(fmt.Errorf("reading topic %s from etcd: %w", name, err))
		}
		if len(resp.Kvs) == 0 {
			return topic.Description{}, fmt.Errorf("topic %q (%s): %w", name, key, ErrTopicNotFound)
		}
		return topic.DecodeRecord(root, key, resp.Kvs[0].Value)
	}
}
