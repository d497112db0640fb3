// Package gctarget sets the Go garbage collector's target (GOGC) of a
// consumerd member: Default unless the operator set GOGC.
//
// Why a member raises it: a member's Go heap turns over fast (every message
// is decoded, staged and published) while what it must keep is small (the
// state lives in RocksDB, outside the Go heap), so at Go's default of 100
// it collects often, and marking and sweeping cost it CPU that a larger
// heap saves. The price is memory: the heap may grow to five times its
// live size between collections. Benchmarks call Apply too, so they
// measure what a member runs.
package gctarget
