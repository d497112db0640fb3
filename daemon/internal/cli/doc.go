// Package cli holds consumerd's client commands: `shards` (create, apply,
// list, unassign, recover, reset, delete), `topics` (create, list, delete),
// `members list`, `publish`, `read` and `query`. Each connects with the
// connection flags of connect.ClientFlags, reads the keyspace once where it
// needs the cluster's view (package cluster), and writes through cluster's
// guarded transactions; `query` asks through package query and `read` reads
// through topic.Reader. Output formats are DESIGN.md §7's contract (the JSON
// shapes are in package api).
//
// Commands builds the tree's client commands for a Program; the public
// daemon package adds them next to `serve` (package server).
package cli
