package cluster

import (
	"context"
	"fmt"
	"io"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/shard"
)

// DropOutput appends drop to shard id's spec and unassigns its replicas,
// in one guarded txn (see `shards outputs --drop`): the primary the leader
// assigns next applies it before it publishes. drop.Term must be above
// every term so far.
func DropOutput(ctx context.Context, cli *clientv3.Client, prefix string, snap allocator.Snapshot, id string, drop shard.OutputDrop, out io.Writer) error {
	info, spec, err := shardSpec(snap, id)
	if err != nil {
		return err
	}
	next := *spec
	next.OutputDrops = append(append([]shard.OutputDrop(nil), spec.OutputDrops...), drop)
	replicas, err := replaceAndUnassign(ctx, cli, prefix, snap, info, &next, "dropping an output")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "outputs %s: drop %s written (term %d); %d replica(s) unassigned: the next primary drops it and publishes the rest\n",
		id, drop, drop.Term, replicas)
	return nil
}
