// Package allocator assigns opaque items (shards) to members through etcd.
//
// Members register under <root>/members/<zone>/<member> with a lease; items
// are declared under <root>/items/<id>; the leader — the member whose key has
// the lowest CreateRevision — writes assignments
// <root>/assign/<item>/<zone>/<member>/<slot> under the assigned member's
// lease, so a dead member's assignments vanish with its lease. Slot 0 is the
// primary; its key's CreateRevision is the primary's fencing term.
//
// Essential types:
//   - KeySpace: a decoded mirror of <root>/ (one Load, then one prefix watch
//     that survives disconnects and compaction; bad keys are logged and skipped).
//   - Member: a process's session: lease, announce-if-absent, Local() stream of
//     its own assignments, UpdateStatus for the shard layer, SetExiting to
//     drain, and the leader loop (schedule, then converge).
//   - Solve (scheduler.go): a pure, deterministic function from members, items
//     and current assignments to desired assignments.
//   - planConverge (converge.go): a pure function from a snapshot and desired
//     assignments to guarded etcd transactions, make-before-break.
//
// The allocator knows nothing of shards, RocksDB or WALs: items are JSON values
// decoded by Config.DecodeItem into something with a DesiredReplication.
package allocator
