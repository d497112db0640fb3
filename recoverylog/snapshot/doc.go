// Package snapshot bounds a shard's recovery time by the size of its
// state rather than its history: it takes incremental snapshots of the
// shard's RocksDB, lets the recovery log be truncated before them, and
// restores them into new replicas.
//
// # Taking a snapshot
//
// Snapshotter.Take (run by the primary on a background goroutine, one at a
// time) first compacts the database when it holds much more than its live
// data (Config.CompactAbove, by default 1.25 times, with at least 16 MiB
// dead: overwritten versions waiting in L0 and the upper levels, which a
// restore would otherwise move too; the dead share is RocksDB's estimate
// corrected by what the Snapshotter's own compactions dropped), then takes
// a RocksDB
// checkpoint (which flushes the memtable first: the
// shard DB writes without RocksDB's WAL; writes go on meanwhile), reads the
// recoverylog.Position stored inside the checkpoint, uploads every SST file
// the Store lacks under the SHA-256 of its content (SSTs are immutable, so
// consecutive snapshots share most of them), uploads the checkpoint's
// non-SST files (MANIFEST-*, CURRENT, OPTIONS-*, WAL) under the snapshot's
// id every time, and writes a Manifest (files with sizes and SHA-256, the
// Position and log id covered, the primary's term). It then appends a
// Snapshot record (recoverylog.Recorder.CommitSnapshot), points
// <root>/snapshots/<shard> in etcd at the manifest (Pointer, written by
// PublishPointer in a txn guarded by the primary's slot-0 assignment key,
// so a deposed primary cannot move it, and never backwards), and calls
// Retain.
//
// # Retention
//
// Retain keeps the newest Config.Kept snapshots the pointer reaches,
// truncates the recovery log before the oldest of them (wal.WAL.Truncate at
// its covered id + 1), and deletes older manifests, their non-SST files, and
// every SST no remaining manifest names. Every step happens after the step
// that makes it safe: files before the manifest naming them, the manifest
// before the pointer, truncation and deletion after the pointer; a crash at
// any step leaves the old or the new snapshot usable.
//
// # Restoring
//
// Restore downloads the pointer's snapshot (or, when a file is missing or
// corrupt, the next older one) into a directory, verifying every file's
// size and SHA-256 (JetStreamStore's object store hashes what it reads
// against the digest it recorded at Put, which Restore compares with the
// manifest's, so the bytes are hashed once) and the restored Position; the caller then replays the
// log after that Position with recoverylog.Player. Recover does both
// offline (`consumerd shards recover`).
//
// # Stores
//
// Store is a small object-store interface (Put, Get, Stat, List, Delete;
// an S3-compatible store is a thin adaptor). JetStreamStore keeps objects
// in a NATS JetStream object-store bucket (the default, on the WAL's NATS;
// one bucket per cluster namespace, see BucketName); DirStore in a directory (a
// shared filesystem).
//
// Objects of a shard: <shard>/manifests/<id>.json, <shard>/sst/<sha256>.sst,
// <shard>/files/<id>/<name>; a snapshot id sorts by the log id it covers.
//
// # Metrics
//
// consumerd_snapshot_duration_seconds, consumerd_snapshot_uploaded_bytes_total,
// consumerd_snapshot_reused_files_total, consumerd_snapshot_compactions_total,
// consumerd_snapshot_failures_total,
// consumerd_recoverylog_truncated_messages_total,
// consumerd_snapshot_restore_duration_seconds and
// consumerd_snapshot_restore_fallbacks_total.
package snapshot
