// Package shardtest runs consumerd members in-process for tests and
// benchmarks: an embedded etcd (internal/etcdtest), a WAL backend (the
// memory backend for fault injection, or JetStream via internal/natstest),
// and nodes that each run a real allocator.Member and shard.Service.
//
// Cluster is the environment; Node one member. With NewCluster the test
// decides assignments itself (Assign, Promote), which makes failover
// scenarios deterministic; NewScheduledCluster leaves scheduling to the
// allocator leader. Helpers publish wordcount input, wait for a shard to
// consume its sources, and read back its counts, so tests compare against
// the wordcount oracle (wordcount.Count of the input).
package shardtest
