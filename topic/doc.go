// Package topic names partitioned message streams on top of the WAL.
//
// A topic is a Description{Name, Partitions}; partition i of topic t is the
// WAL channel ChannelName(t, i) = "<t>/%04d" (ParseChannelName reverses it
// and rejects anything else with an error naming the problem). PartitionFor
// routes a message key to a partition with a stable hash (FNV-1a, 32 bit,
// modulo the partition count), so every process routes a key the same way.
//
// Publisher appends to partitions through a wal.Opener: Publish and
// PublishAsync pick the partition from the message key, PublishTo targets an
// explicit partition. It opens each partition's WAL (term 0) once and caches
// it until Close. Envelope pairs a message read back with its Partition.
//
// A topic's description is stored in etcd, one record per topic at
// Key(root, name) (record.go: the key and a strict decoding), and Registry
// owns those records: Create (guarded, so a partition count never changes),
// Get (an unknown topic names the topics there are), List, and Delete
// (guarded by the caller's compares). The daemon's commands and the shards'
// output lookup go through it; nothing else reads or writes the records.
// The package knows nothing of shards; the wal package knows nothing of
// topics.
package topic
