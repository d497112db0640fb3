// Package shard runs stateful stream consumers: it turns the allocator's
// assignments into running shard replicas whose RocksDB state survives any
// member's death and changes exactly once per source message.
//
// # Applications
//
// An application implements Consumer (plus optionally Filterer,
// ShardIniter, ShardHalter, OptionsIniter; see interfaces.go) and is
// registered as an App: its topics, a factory of Consumers, and how to
// query and merge its state. A Filterer is RocksDB's compaction filter: it
// drops keys or rewrites their values when RocksDB compacts. A shard is
// described by a Spec (stored as JSON at <root>/items/<shard>): the app
// that runs it, the topic partitions it consumes (Sources), its hot
// standbys, and its transaction durations. Shard.Partition is the
// partition index all its sources share, or -1 when they name different
// ones.
//
// # Lifecycle
//
// Service follows allocator.Member.Local(). For each assignment of this
// member it starts a replica, which:
//
//  1. BACKFILL: opens (or creates) the RocksDB at <DataDir>/shards/<shard>/
//     with the Consumer's options and compaction filter, and replays the
//     shard's recovery log (recoverylog.Player) from the position stored in
//     the DB. A DB left by an earlier replica on this host is reused when
//     its position is still in the log. With Config.Snapshots, the newest
//     snapshot is restored first when it covers more of the log than the
//     local DB, or when the log was truncated past the DB's position
//     (wal.ErrTruncated); without snapshots such a DB is wiped and rebuilt
//     from the log, and a log that no longer starts at its beginning fails
//     the replica rather than serving partial state.
//  2. STANDBY: once caught up, keeps tailing the log.
//  3. On slot 0 (at once, or later when a standby is promoted): opens the
//     recovery log with term = the slot-0 key's CreateRevision, which fences
//     every older writer, appends a Fence and reads up to it (Handoff),
//     loads the source offsets committed in the DB, opens a verifying
//     scanner per source after its offset if the channel still holds it in
//     the incarnation recorded with it (sourcecheck.go: else FAILED, or the
//     spec's source reset applies), calls ShardIniter, and becomes PRIMARY.
//  4. PRIMARY runs the transaction loop (below) until the assignment is
//     removed (ShardHalter, then close; the DB is kept on disk for a fast
//     restart), the member's lease is lost (Service.Run halts everything at
//     once), or an error.
//
// Any error from the application (a panic included), RocksDB or the logs
// moves the replica to FAILED with the error text (at most 4 KiB) in its
// etcd status; that replica stops and the member's other replicas carry on.
// A failed replica restarts only when it is given a new assignment (e.g.
// after `consumerd shards unassign --failed`).
//
// # Transactions
//
// A transaction opens on the first source message; Consume is called for
// each message (messages of several sources are merged, each source in
// offset order). It closes when max_txn_duration passed, when its input
// stalls after min_txn_duration, or at a size cap (Config.TxnMaxBytes of
// input, Config.TxnMaxMessages). Flush then writes the cache to
// Transaction(); the last consumed id of every source goes into the same
// batch (recoverylog.OffsetKey); and the batch is committed to the recovery
// log (recoverylog.Recorder.Commit), then applied to RocksDB once the log
// acknowledged it. The next transaction consumes while that commit is in
// flight, but cannot close before it completed: two deep at most. The
// member's primaries share a commit gate (Config.CommitsInFlight, commitgate.go):
// a transaction that may close while every slot is taken goes on consuming
// until one is free, so many busy primaries commit fewer, larger
// transactions than they would alone.
//
// State and offsets change together, and only log-acknowledged Txn records
// count, so after any crash the next primary resumes exactly where the
// committed state ends: each message changes state exactly once. Messages
// an application publishes through the Publisher Consume and Flush get are
// exactly once too: they are staged as outbox rows in the same recovery-log
// record and published after the commit, as chained atomic batches that a
// retry or a successor cannot store twice (see Publisher). Only a
// topic.Publisher used outside transactions is at-least-once.
//
// # Snapshots
//
// With Config.Snapshots a primary checkpoints its database every
// snapshot_interval_bytes of recovery log, records the snapshot in the log
// and in etcd, and truncates the log before the oldest snapshot kept
// (see SnapshotOptions and package recoverylog/snapshot).
//
// # Queries
//
// Service.Primary gives read access to a local primary's committed state
// (what App.Query and App.Scan read). Specs and PrimaryOf find, on a
// snapshot of the allocator's mirror, the shards of an app and the member
// running each one's primary (the daemon routes /v1/query and its client
// commands with them).
//
// # Why one package
//
// At about 4,600 lines it is above the tree's 2,500-line guideline, on
// purpose: it has one job, running a shard replica, and its parts share the
// replica's unexported state. The transaction loop writes through the open
// transaction's overlay and keeps the commits in flight that Get must see
// (overlay.go); the outbox rows it stages are what the drainer publishes
// and a successor re-reads (outbox.go, drain.go); the lifecycle
// (replica.go, primary.go) owns the database, the recorder and the drainer
// that both use. Its policies are already pure and apart, each with
// datadriven tests (txncore.go: when a transaction closes; coalesce.go:
// which committed outputs go out together; transient.go, damaged.go: which
// failures restart and which fail), as is the RocksDB WriteBatch format
// (package internal/writebatch). A sub-package for the outbox would have to
// export the overlay, the recorder's commits and the replica's failure
// path, for no boundary an application sees: the application's contract is
// interfaces.go and app.go.
//
// # Metrics
//
// consumerd_shard_status (replicas by state), consumerd_shard_transactions_total,
// consumerd_shard_messages_consumed_total, consumerd_shard_bytes_consumed_total,
// consumerd_shard_txn_duration_seconds, consumerd_shard_source_lag_messages
// (negative when a source lost messages the shard read),
// consumerd_shard_source_lost_total and consumerd_shard_failures_total.
package shard
