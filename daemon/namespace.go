package daemon

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// namespaceKey is <prefix>/wal-namespace: the WAL namespace the cluster
// under prefix keeps its streams in, recorded by its first member.
func namespaceKey(prefix string) string { return prefix + "/wal-namespace" }

// claimNamespace records ns as the cluster's WAL namespace, or checks it
// against the one recorded. A member with another namespace would read and
// write other streams than the rest of its cluster (its shards' state would
// seem lost, its outputs go where nobody reads): it is refused, naming both.
func claimNamespace(ctx context.Context, cli *clientv3.Client, prefix, ns string) error {
	key := namespaceKey(prefix)
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, ns)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("recording the WAL namespace at %s: %w", key, err)
	}
	if resp.Succeeded {
		return nil
	}
	rr := resp.Responses[0].GetResponseRange()
	if rr == nil || len(rr.Kvs) != 1 {
		return fmt.Errorf("reading the WAL namespace at %s: no value", key)
	}
	if got := string(rr.Kvs[0].Value); got != ns {
		return fmt.Errorf("the cluster under --etcd.prefix %s keeps its WAL in namespace %q (%s), but this member would use %q: "+
			"start it with --wal.namespace %s; two namespaces in one cluster would split its streams",
			prefix, got, key, ns, got)
	}
	return nil
}
