package shard

import (
	"context"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
)

// Shard is the application's view of one running shard primary. It is valid
// from ShardIniter.InitShard until ShardHalter.HaltShard returns, and only on
// the goroutine that calls the application (Consume, Flush, InitShard,
// HaltShard are never called concurrently for one shard). A Shard handed out
// for queries (Service.Primary) is a read-only view of committed state: its
// Transaction and Cache are nil.
type Shard interface {
	// ID is the shard's id, e.g. "wordcount-0002".
	ID() string
	// Spec is the shard's spec as of when it became primary (a later change
	// of its transaction durations applies without a new Shard; a change of
	// its app or sources restarts the replica). Do not modify it.
	Spec() *Spec
	// Partition is the partition index that every source of the shard
	// reads (a shard made by `shards create` reads partition i of each of
	// its app's topics), or -1 when its sources name different partitions
	// (a spec written for `shards apply` may, e.g. partitions 0 and 1 of one
	// topic): then read Spec().Sources.
	Partition() int
	// Context is cancelled when the shard halts.
	Context() context.Context

	// Cache returns the application's per-shard cache (nil until SetCache).
	// It survives across transactions while this shard stays primary; use it
	// for hot objects that Consume reads and Flush writes to Transaction.
	Cache() any
	// SetCache replaces the per-shard cache.
	SetCache(any)

	// Database is the shard's RocksDB. It holds only committed, acknowledged
	// transactions: writes of the open transaction and of a transaction whose
	// commit is still in flight are not visible in it. Use Get for a read that
	// sees them. Never write to Database directly: such writes are not
	// recorded and are lost on failover.
	Database() *grocksdb.DB
	// Transaction is the open transaction's write batch: every Put, Delete and
	// Merge made to it between the first Consume and the end of Flush is
	// committed atomically with the source offsets, exactly once.
	Transaction() *grocksdb.WriteBatch
	// Get reads key as of the open transaction: its own writes, then writes of
	// transactions still committing, then Database. A missing key returns
	// (nil, nil). The returned slice is the caller's. Put, Delete,
	// SingleDelete and DeleteRange are visible; a key with a Merge operand
	// not yet applied to Database returns an error wrapping ErrMergePending.
	// Reading the open transaction re-indexes the writes made since the last
	// Get, so interleaving many writes and Gets costs more than reading
	// through the Cache. consumerd's own keys (prefix "\x00consumerd/") are
	// read from Database only.
	Get(key []byte) ([]byte, error)
	// ReadOptions and WriteOptions are the options the shard uses with Database.
	ReadOptions() *grocksdb.ReadOptions
	WriteOptions() *grocksdb.WriteOptions
}

// Consumer is an application: it turns messages of its shard's sources into
// state. App.NewConsumer makes one per replica; the replica uses it for its
// database options (OptionsIniter, Filterer) from the start, and calls
// Consume and Flush only while it is primary.
//
// Unlike the seed's Consumer it has no Topics method: the topics are
// App.Topics, because they are needed before any Consumer exists (`shards
// create` derives the specs' sources from them).
//
// For each transaction the shard calls Consume once per message, in offset
// order per partition, then Flush once; then it commits the transaction's
// batch together with the read offsets to the recovery log, and applies it to
// Database once the log acknowledged it. A returned error fails the shard
// (state FAILED, with the error text in etcd): nothing of the open
// transaction is committed, and other shards keep running. A panic is
// recovered and treated as an error. Messages published through pub are
// part of the transaction: exactly once (see Publisher).
type Consumer interface {
	// Consume applies one message to the open transaction.
	Consume(s Shard, env topic.Envelope, pub Publisher) error
	// Flush writes whatever the transaction still holds in the cache to
	// s.Transaction(). It is called once per transaction, before commit. The
	// Cache survives Flush; clear what the next transaction must not see.
	Flush(s Shard, pub Publisher) error
}

// Publisher stages an application's output messages in the open
// transaction. A staged message is written to the transaction's batch (an
// outbox row, committed with the state and the source offsets) and costs no
// network I/O; once the commit is durable the shard publishes the
// transaction's outputs, in transaction order and, per partition, in the
// order staged, as one atomic batch per (transaction, output partition),
// chained so that it lands exactly once — also when a zombie primary races
// its successor, or a primary restarts — and a reader needs no dedupe
// logic. Outputs become visible only after their transaction committed,
// shortly after. An error (an unknown topic, a partition out of range)
// should be returned by the app: it fails the shard.
//
// The message is copied: the caller may reuse its buffers. The at-least-once
// topic.Publisher (for tools such as `consumerd publish`) stays available
// outside transactions.
type Publisher interface {
	// Publish stages msg for partition topic.PartitionFor(msg.Key, N) of
	// topicName, N being the topic's partition count (its record in etcd).
	Publish(topicName string, msg message.MutableMessage) error
	// PublishTo stages msg for an explicit partition.
	PublishTo(part topic.Partition, msg message.MutableMessage) error
	// Partitions is the partition count of topicName, as Publish routes by
	// (its record in etcd): e.g. to send a control message, such as a
	// watermark, to every partition of an output, or to learn how many
	// shards read a source topic. Any topic with a record may be named,
	// not only outputs.
	Partitions(topicName string) (int, error)
}

// Filterer is optionally implemented by a Consumer to drop or rewrite keys
// during RocksDB compaction. Its signature is deliberately that of
// grocksdb's CompactionFilter.Filter, and it is wired as the database's
// compaction filter on every replica: return remove to drop the key, or
// keep it with newVal != nil as its new value (nil keeps the value).
//
// It must be a pure function of key and value, and idempotent (a key may
// pass through several compactions, so rewriting a rewritten value must
// change nothing): it runs on RocksDB's threads, maybe concurrently, at
// times and levels that differ between a primary, its standbys and a
// restored snapshot. Reads may see a value before or after its rewrite.
// key and val are valid only during the call and must not be modified.
// Only full values are passed, not merge operands, and never consumerd's
// own keys (prefix "\x00consumerd/"). A panic keeps the key unchanged.
type Filterer interface {
	Filter(level int, key, val []byte) (remove bool, newVal []byte)
}

// ShardIniter is optionally implemented by a Consumer to prepare a shard
// after it became primary and before its first Consume. An error fails the
// shard.
type ShardIniter interface {
	InitShard(s Shard) error
}

// ShardHalter is optionally implemented by a Consumer to release what
// InitShard took, when the shard stops being primary or the member exits.
type ShardHalter interface {
	HaltShard(s Shard)
}

// OptionsIniter is optionally implemented by a Consumer to adjust the
// RocksDB options before the shard's database opens (merge operators,
// compression, table format). opts start as DefaultDBOptions (a Bloom
// filter in every table file); a block based table factory set here
// replaces that one. On a member with a memory budget (Config.Memory,
// serve's --rocksdb.memory) the block cache and the write buffer manager
// are the member's, set after InitOptions: a cache set here is replaced
// by the shared one. It runs on every replica (standbys too: they
// apply the same batches, so a merge operator must be set everywhere).
type OptionsIniter interface {
	InitOptions(opts *grocksdb.Options)
}
