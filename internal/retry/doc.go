// Package retry is consumerd's one retry policy: exponential backoff with
// jitter, bounded by attempts, a context and a stop channel. Every loop in
// the tree that retries a failed operation after a wait uses it — the WAL
// adaptor's appends and reads, the allocator's keyspace watch, the daemon's
// member session and its clients — so backoff, jitter and the wording of
// "gave up" errors are decided here once.
//
// Essential types: Policy (the schedule), Call (what to retry and when to
// stop), Backoff (the schedule as an iterator, for loops that are not one
// function call).
//
// Jitter: each wait is drawn uniformly from [d/2, d], where d doubles from
// Policy.Initial up to Policy.Max. Half the nominal wait is kept so a retry
// never comes back at once, and the other half is random so that many
// clients failing together (an etcd leader change, a NATS restart) do not
// retry in lockstep.
package retry
