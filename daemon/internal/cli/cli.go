package cli

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/topic"
	"github.com/spf13/cobra"
)

// connectAndLoad connects to etcd with cf and reads the whole keyspace
// once. The caller closes the returned client.
func connectAndLoad(ctx context.Context, cf *connect.ClientFlags) (*clientv3.Client, allocator.Snapshot, error) {
	cli, err := cf.Etcd(ctx)
	if err != nil {
		return nil, allocator.Snapshot{}, err
	}
	snap, err := cluster.Load(ctx, cli, cf.EtcdPrefix)
	if err != nil {
		cli.Close()
		return nil, allocator.Snapshot{}, err
	}
	return cli, snap, nil
}

// Commands are the built-in client commands of prog's command line.
func Commands(prog cmdline.Program) []*cobra.Command {
	return []*cobra.Command{
		newShardsCommand(prog), newTopicsCommand(prog), newMembersCommand(prog),
		newPublishCommand(prog), newReadCommand(prog), newQueryCommand(prog),
	}
}

// topicsAt is the topic registry of the cluster under prefix.
func topicsAt(cli *clientv3.Client, prefix string) *topic.Registry {
	return &topic.Registry{Client: cli, Prefix: prefix}
}
