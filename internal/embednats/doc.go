// Package embednats runs an in-process nats-server with JetStream enabled.
//
// The daemon uses it when no external NATS URL is configured (DESIGN §2: the
// embedded default listens on 127.0.0.1:4222 and stores streams under
// <data-dir>/nats); tests use it through internal/natstest, each on its own
// port and directory. The server is real: clients connect to it over TCP with
// nats.go exactly as they would to a production cluster.
//
// Essential types: Config (address, store directory, sync policy, logger) and
// Server (URL, Shutdown). Start returns only once the server accepts client
// connections, or an error naming the address it could not serve.
//
// Durability: by default JetStream acknowledges an append once the message is
// written to the file store (the OS page cache) and fsyncs periodically (every
// two minutes, nats-server's default), so a machine crash — not a process crash
// — can lose the last appends. Config.SyncAlways makes the store fsync every
// write before the acknowledgement: no acknowledged append is lost on power
// failure, at the cost of one fsync per store write — pipelined small
// appends run one to two orders of magnitude slower (BenchmarkSyncAlways
// measures it against the default on the machine at hand). Use it for a
// single embedded
// server whose data must survive power loss; production clusters with R=3
// replicas usually rely on replication instead.
package embednats
