// Package gctarget sets the Go garbage collector's target (GOGC) of a
// consumerd member, Default unless the operator set GOGC, and its soft
// memory limit (GOMEMLIMIT), half of the machine's or cgroup's memory
// unless the operator set GOMEMLIMIT.
//
// Why a member raises the target: a member's Go heap turns over fast
// (every message is decoded, staged and published) while what it must
// keep is small (the state lives in RocksDB, outside the Go heap), so at
// Go's default of 100 it collects often, and marking and sweeping cost it
// CPU that a larger heap saves. The price is memory: the heap may grow to
// five times its live size between collections. Benchmarks call Apply
// too, so they measure what a member runs.
//
// Why a member also sets a soft memory limit: with GOGC 400 and none, an
// idle member with 256 shards sat near 0.9 GB RSS with 0.3 GB live heap.
// The limit (ApplyMemoryLimit) makes the collector run sooner as the heap
// nears it, so a member only trades memory for CPU while there is memory
// to spare. Half of the memory, not all: RocksDB's budget (a quarter by
// default) lives outside the Go heap, and the limit does not count it.
// Benchmarks do not call ApplyMemoryLimit.
package gctarget
