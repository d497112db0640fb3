// Package waitfor is the tests' one way to wait for a condition that has no
// notification: poll it until it holds, or fail the test once a timeout
// has passed, naming what was awaited and the last reason the condition
// gave for not holding. Tests across the tree (the shard test kit's
// Eventually, the multi-process cluster tests, the benchmarks) use it, so
// the failure wording and the polling schedule are decided here once.
//
// Until is for tests: it polls often at first (a condition that holds
// soon is seen soon) and backs off to MaxInterval (a long wait, whose
// condition may run a CLI command or read a cluster's status, costs little
// on a busy machine). Every polls at a fixed interval, for benchmarks that
// time a wait: there the poll interval bounds the measurement's
// resolution, and a poll that runs inside the measured span (a RocksDB
// read) costs the measured process, so each benchmark picks it.
//
// A condition is a func() (bool, string): whether it holds and, if not,
// why (the latest state seen, e.g. "2 of 3 shards PRIMARY"). An empty
// reason keeps the previous one.
package waitfor
