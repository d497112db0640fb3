// Package cluster is the daemon's view of a cluster's keyspace in etcd and
// the changes its commands make there, for the member (package server) and
// the client commands (package cli) alike:
//
//   - reading: Load (the whole keyspace once, decoded: allocator.Snapshot),
//     ShardRows and MemberRows (what `shards list` and `members list` print
//     and the status pages show, pure), FillLag (a shard's lag: the WAL's
//     last id minus the offset its primary reports), FetchStatus (a member's
//     GET /v1/status), topics and the partitions no shard reads
//     (UnreadPartitions, WarnUnread);
//   - writing shard specs: CreateSpecs (never overwrites), ApplySpecs and
//     WriteSpecs (guarded by each key's ModRevision, in txns of at most
//     MaxTxnOps), EnsureApp (the embedded default's topics and shards),
//     ResetShard (accepting a recovery log that lost records).
//
// Every write is a guarded etcd transaction: a concurrent change fails it,
// naming what changed, rather than being overwritten.
package cluster
