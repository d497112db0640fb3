package shard

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/topic"
)

// EtcdTopics is the topic lookup of Config.Topics: topic.Registry's Get of
// the records under root, with etcd's failures marked transient (etcd's
// unavailability is not the shard's fault, so the replica restarts by
// itself). A topic with no record (topic.ErrUnknownTopic) or a record that
// does not decode (topic.ErrBadRecord) is not transient: a person must act.
func EtcdTopics(cli *clientv3.Client, root string) func(ctx context.Context, name string) (topic.Description, error) {
	reg := &topic.Registry{Client: cli, Prefix: root}
	return func(ctx context.Context, name string) (topic.Description, error) {
		d, err := reg.Get(ctx, name)
		if err != nil && !errors.Is(err, topic.ErrUnknownTopic) && !errors.Is(err, topic.ErrBadRecord) {
			return topic.Description{}, markTransient(err)
		}
		return d, err
	}
}
