// Package consumebench holds the benchmarks of the realistic consume path,
// each against a hand-written raw loop doing the same work with no
// framework, measured in the same round:
//
//   - BenchmarkConsumeRealistic (and .r3 on a 3-node JetStream cluster with
//     R=3 streams): an application doing a read-modify-write per message on
//     a key space of unique keys, 1 KiB payloads and one output per message,
//     through the whole exactly-once path (scanner, Consume, the recovery-log
//     commit, RocksDB apply, outputs published after the commit), against a
//     loop of nats.go ordered consumer → RocksDB Get and WriteBatch with the
//     same puts plus an offsets key → JetStream publish of the outputs.
//   - BenchmarkLatency: publish acknowledged → state committed and visible
//     to a query, at half the maximum rate the same round measured.
//
// The package has no code of its own outside its tests: the application
// (upsert) and the raw loop live in the test files.
package consumebench
