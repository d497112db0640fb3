package cluster

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/shard"
	"github.com/hashicorp/go-hclog"
)

// Load reads the whole keyspace once.
func Load(ctx context.Context, cli *clientv3.Client, prefix string) (allocator.Snapshot, error) {
	ks := allocator.NewKeySpace(cli, prefix, shard.DecodeSpec, hclog.NewNullLogger())
	if err := ks.Load(ctx); err != nil {
		return allocator.Snapshot{}, fmt.Errorf("reading %s/ from etcd: %w", prefix, err)
	}
	return ks.Snapshot(), nil
}
