// Package allocator assigns opaque items (shards) to members through etcd.
//
// Members register under <root>/members/<zone>/<member> with a lease; items
// are declared under <root>/items/<id>; the leader — the member whose key has
// the lowest CreateRevision — writes assignments
// <root>/assign/<item>/<zone>/<member>/<slot> under the assigned member's
// lease, so a dead member's assignments vanish with its lease. Slot 0 is the
// primary; its key's CreateRevision is the primary's fencing term (a
// promotion creates a new slot-0 key, so terms only grow). Values are JSON.
//
// Essential types:
//   - KeySpace: a decoded mirror of <root>/ (one Load, then one prefix watch
//     with progress notifications and require-leader that resumes after
//     disconnects and reloads after compaction; undecodable keys are logged
//     with the key and skipped). WaitForRevision gives read-your-writes.
//   - Member: a process's session: lease with keep-alive, announce-if-absent
//     (ErrMemberExists for a second process with the same id), the Local()
//     stream of its own assignments, UpdateStatus for the shard layer,
//     SetExiting to drain, Done() when the lease is lost, and — while it is
//     the leader — the schedule-and-converge loop.
//   - Solve (scheduler.go, its phases in scheduler_*.go): a pure,
//     deterministic function from members, items and current assignments to
//     desired assignments (limits, one replica per member, zone spread,
//     replication, few moves, balance).
//   - planConverge (plan.go, per-item steps in plan_groups.go): a pure
//     function from a snapshot to guarded operation groups,
//     make-before-break; batchGroups packs them into transactions of at most
//     128 operations, each also comparing the leader's own member key
//     ModRevision so a deposed leader's writes fail. The converger
//     (converge.go) writes them to etcd.
//
// Converge details: new replicas are written IDLE; the shard layer reports
// BACKFILL, STANDBY, PRIMARY or FAILED through UpdateStatus. A replica is
// removed only while its item keeps its desired number of consistent
// (STANDBY/PRIMARY) replicas. A primary moves by promoting a consistent
// standby to slot 0 in the same transaction that deletes (or demotes) the old
// primary; the new slot-0 key carries the standby's status until the new
// primary reports PRIMARY. Adds to a member already holding its limit wait
// until it gave up what it must give up, so limits hold during handoffs too
// (unless two full members must swap, which would otherwise wait forever).
// FAILED replicas stay until an operator deletes their key.
//
// The allocator knows nothing of shards, RocksDB or WALs: items are JSON values
// decoded by Config.DecodeItem into something with a DesiredReplication.
//
// # Why one package
//
// At about 3,500 lines it is above the tree's 2,500-line guideline, on
// purpose: it has one job, placing items on members through etcd, and its
// parts speak one vocabulary. The key layout (keys.go), the decoded
// keyspace (Snapshot, Assignment, ReplicaStatus) and the primary terms are
// what the member session writes, what planConverge reads and what the
// converger's guards compare; the scheduler's input is built from a
// Snapshot (plan.go) and its replicas carry ReplicaState. The pure parts
// are already apart in their own files and types (Solve and its Sched*
// types, planConverge): a sub-package for them would have to move
// ReplicaState out of the API the shard layer uses, or export the
// converger's plan groups, for no boundary a caller sees. The scenario
// tests drive member, keyspace, plan and converger together against one
// etcd.
package allocator
