// Package gctarget sets the Go garbage collector's target (GOGC) of a
// consumerd member: Default unless the operator set GOGC.
//
// Why a member raises it: a member's Go heap is small (the state lives in
// RocksDB, outside it) and turns over fast (every message is decoded,
// staged and published), so at Go's default of 100 it collects many times
// a second. Each collection costs CPU of its own, and with the embedded
// nats-server (the default deployment) it also clears the server's block
// caches, which nats-server 2.12 keeps behind weak pointers once written:
// the next append to each stream then reads its whole last block (up to
// 8 MiB) back from disk. Benchmarks call Apply too, so they measure what a
// member runs.
package gctarget
