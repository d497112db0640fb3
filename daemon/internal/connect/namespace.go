package connect

import (
	"context"
	"fmt"
	"strconv"

	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// NamespaceKey is <prefix>/wal-namespace: the WAL namespace the cluster
// under prefix keeps its streams in, recorded by its first member.
func NamespaceKey(prefix string) string { return prefix + "/wal-namespace" }

// claimRecord writes value at key unless the key exists, and returns what
// the key holds then (value when this call wrote it): how the first member
// records a cluster-wide setting that later members must share. what names
// the setting in errors. A transient etcd failure is waited out
// (RetryAtStart).
func claimRecord(ctx context.Context, log hclog.Logger, cli *clientv3.Client, key, value, what string) (string, error) {
	var resp *clientv3.TxnResponse
	err := RetryAtStart(ctx, log, "recording the "+what, func(ctx context.Context) (err error) {
		resp, err = cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, value)).
			Else(clientv3.OpGet(key)).
			Commit()
		return err
	})
	if err != nil {
		return "", fmt.Errorf("recording the %s at %s: %w", what, key, err)
	}
	if resp.Succeeded {
		return value, nil
	}
	rr := resp.Responses[0].GetResponseRange()
	if rr == nil || len(rr.Kvs) != 1 {
		return "", fmt.Errorf("reading the %s at %s: no value", what, key)
	}
	return string(rr.Kvs[0].Value), nil
}

// ClaimNamespace records ns as the cluster's WAL namespace, or checks it
// against the one recorded. A member with another namespace would read and
// write other streams than the rest of its cluster (its shards' state would
// seem lost, its outputs go where nobody reads): it is refused, naming both.
func ClaimNamespace(ctx context.Context, log hclog.Logger, cli *clientv3.Client, prefix, ns string) error {
	key := NamespaceKey(prefix)
	got, err := claimRecord(ctx, log, cli, key, ns, "WAL namespace")
	if err != nil {
		return err
	}
	if got != ns {
		return fmt.Errorf("the cluster under --etcd.prefix %s keeps its WAL in namespace %q (%s), but this member would use %q: "+
			"start it with --wal.namespace %s; two namespaces in one cluster would split its streams",
			prefix, got, key, ns, got)
	}
	return nil
}

// ReplicasKey is <prefix>/wal-replicas: the replication of the streams the
// cluster creates (serve --wal.replicas), recorded by its first member, so
// that a stream created by a client command (publish to a partition no
// member has opened yet) is replicated like the members' own.
func ReplicasKey(prefix string) string { return prefix + "/wal-replicas" }

// ClaimReplicas records n as the cluster's stream replication, or checks it
// against the one recorded: members creating streams with different
// replication would leave some partitions on fewer servers than the
// operator chose, which shows only when a server is lost.
func ClaimReplicas(ctx context.Context, log hclog.Logger, cli *clientv3.Client, prefix string, n int) error {
	key := ReplicasKey(prefix)
	got, err := claimRecord(ctx, log, cli, key, strconv.Itoa(n), "WAL replicas")
	if err != nil {
		return err
	}
	if got != strconv.Itoa(n) {
		return fmt.Errorf("the cluster under --etcd.prefix %s creates its streams with %s replicas (%s), but this member has --wal.replicas %d: "+
			"start it with --wal.replicas %s (to change the cluster's, put the new count at %s with etcdctl; existing streams keep theirs)",
			prefix, got, key, n, got, key)
	}
	return nil
}

// RecordedReplicas is the cluster's stream replication: the recorded one,
// or 1 when no member has started yet. A record that is not a count from 1
// to 5 is an error naming the key.
func RecordedReplicas(ctx context.Context, cli *clientv3.Client, prefix string) (int, error) {
	key := ReplicasKey(prefix)
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("reading the cluster's WAL replicas at %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return 1, nil
	}
	n, err := strconv.Atoi(string(resp.Kvs[0].Value))
	if err != nil || n < 1 || n > 5 {
		return 0, fmt.Errorf("the cluster's WAL replicas at %s is %q, not a count from 1 to 5: put the count the members use (serve --wal.replicas) there with etcdctl", key, resp.Kvs[0].Value)
	}
	return n, nil
}

// WALNamespaceUsage is --wal.namespace's help, for serve and the clients.
const WALNamespaceUsage = "namespace of this cluster's JetStream streams, subjects and snapshot bucket ([A-Za-z0-9-]+, not OBJ or KV); empty derives it from --etcd.prefix: /consumerd gives consumerd, /a/b-c gives a-sb--c"

// WALNamespace is the cluster's WAL namespace: the --wal.namespace given, or
// the one derived from --etcd.prefix (jetstream.NamespaceOf, the one
// derivation). The error names the flag at fault and its value.
func WALNamespace(explicit, etcdPrefix string) (string, error) {
	if explicit != "" {
		if err := jetstream.ValidNamespace(explicit); err != nil {
			return "", fmt.Errorf("--wal.namespace: %w", err)
		}
		return explicit, nil
	}
	ns, err := jetstream.NamespaceOf(etcdPrefix)
	if err != nil {
		return "", fmt.Errorf("--etcd.prefix: %w; choose another prefix or set --wal.namespace", err)
	}
	return ns, nil
}
