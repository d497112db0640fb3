// Package recoverylog keeps a shard's RocksDB in step with its recovery log,
// the WAL channel "recovery/<shard>" (see Channel). The log is the source of
// truth; the local DB is a cache of it, written with RocksDB's own WAL
// disabled.
//
// Records (records.go) are binary and versioned, each sealed by a CRC32C
// (Castagnoli) over its bytes:
//   - Txn: one committed transaction — the RocksDB WriteBatch bytes (the
//     format is package internal/writebatch's), which hold the
//     application's writes and the source read offsets (OffsetKey,
//     PutOffset: a SourceOffset, the id read up to with the channel's
//     incarnation and the last source reset applied). A batch over
//     DefaultChunkSize (900 KiB, under
//     JetStream's 1 MiB max_payload) is written as several chunk records
//     (part i of n) that count only once the last one is read.
//   - Fence: written by a new writer before its first Txn: term and author.
//   - Snapshot: a manifest pointer and the log id the snapshot covers.
//
// Every record carries seq (its index in the chain), the chain checksum
// before it, and its writer's term. The chain checksum after a record is the
// CRC32C fold of the previous chain checksum and the record's bytes (after
// Gazette's recovery-log FSM). The FSM (fsm.go, pure) applies only a record
// that extends the chain (seq == Position.Seq+1 and prev checksum ==
// Position.Checksum) and ignores records authored under a term below the last
// applied Fence; so a zombie writer's branch is ignored by every reader even
// on a backend without conditional appends. The backend's fencing (a WAL
// opened with a higher term makes older writers' appends fail with
// wal.ErrFenced) is the first line of defence; the chain is the second.
//
// The DB holds the applied Position under PositionKey. Applying a record is
// one RocksDB write of the record's batch plus Put(PositionKey, position),
// so state and position change atomically: with RocksDB's WAL disabled a
// crash loses a suffix of whole writes (one memtable write each, default
// column family), and replay restarts from the position the DB kept.
// Column families other than the default one would need atomic_flush.
//
// Player replays the log from LoadPosition(db) (CaughtUp closes once it
// reached the log head seen at start), keeps tailing, and Handoff turns it
// into the writer: it appends a Fence through a WAL opened with the new term
// and applies records until it reads its own Fence. The applied Fence
// defines the handoff point: records of the previous writer acknowledged
// before it (and so extending the chain first) are committed and applied; a
// fence that lost that race is retried from the newer position. Recorder then
// appends Txn records continuing its own chain, pipelined, and applies each to
// the DB strictly in order once acknowledged — on the goroutine that waits
// for the commit (the shard's transaction loop), never on the WAL's reply
// goroutine; it has no goroutine of its own and relies on the WAL reporting
// acknowledgements in call order. The first error (for instance
// wal.ErrFenced after a newer handoff) breaks it for good.
//
// If the DB's position was truncated from the log (or the DB is empty and
// the log no longer starts at seq 1), Play fails with an error wrapping
// wal.ErrTruncated: the caller rebuilds from a snapshot.
package recoverylog
