// Package daemon is the consumerd command line: the `serve` member process
// and the client subcommands (shards, topics, members, publish, read, query), as specified
// in DESIGN.md §7. cmd/consumerd is a one-line main around it; a team that
// writes its own application builds its own daemon the same way:
//
//	func main() { os.Exit(daemon.Main(myapp.App(), wordcount.App())) }
//
// # How it fits
//
// serve wires the other packages together: it starts (or connects to) etcd
// and the NATS JetStream WAL, joins the cluster as an allocator.Member whose
// items are shard.Specs (DecodeItem: shard.DecodeSpec, endpoint: the HTTP
// address), runs a shard.Service that follows the member's assignments, and
// serves HTTP: the status pages (/ and /shards/<id>), /metrics, /livez,
// /readyz, /v1/status and /v1/query. When the
// member's lease is lost (e.g. the process was frozen past its TTL) the
// session is torn down — every replica stops — and the member joins again
// under a new lease. SIGTERM/SIGINT marks the member exiting; the leader
// drains it make-before-break and serve exits 0 once nothing is assigned,
// or 1 after --shutdown-timeout; a second signal exits at once.
//
// The HTTP endpoints are defined in http.go: /readyz is 200 when the
// member's etcd session is live, no local replica is FAILED and every local
// slot-0 replica is PRIMARY; /v1/query forwards a shard query once to the
// shard's primary (header Consumerd-Forwarded prevents loops). /metrics is
// the default Prometheus registry without etcd's own server metrics (served
// at /metrics/etcd), as those break Prometheus naming conventions. The
// status pages (status_page.go) render html/template pages from the
// member's view of etcd plus the members' /v1/status (status_peers.go),
// built by the pure functions of status_view.go.
//
// Client subcommands read the keyspace once (allocator.KeySpace.Load), write
// specs in guarded etcd txns of at most 128 ops, publish through
// topic.Publisher, read topics through WAL scanners, and gather query
// answers over HTTP from the shard primaries that routeQuery picks (every
// shard of the app, or for an app keyed by a topic only the owner of the
// key's partition) — never a silently partial answer: a shard without a
// serving primary, or a shard spec in etcd that does not decode, is an error
// unless the user asked for a partial answer (--partial), which then says so. Keys, values and payloads are bytes throughout; JSON
// carries a field as text when it is valid UTF-8 and as base64 ("key_b64")
// otherwise (bytes.go).
//
// Every flag is mirrored by an environment variable, CONSUMERD_ + the flag
// upper-cased with '.' and '-' as '_'; a flag given on the command line wins.
//
// # Essential types
//
//   - Main / Run: run the command line, return the exit code (0 ok, 1 error,
//     2 usage error). Errors print as one line; panics are caught.
//   - Options: the apps a binary knows, its name in help and errors, extra
//     client commands, and its streams/env/signals (tests).
//   - Command, Client (command.go): a custom daemon's own client
//     subcommand, with the built-in connection flags, run with a connected
//     Client whose CreateTopic, ApplySpecs, ReadPartition and
//     FollowPartition are the code paths of `topics create`, `shards apply`
//     and `read`; UsageError makes its flag errors exit 2. cmd/nexmark is
//     one (examples/nexmark: setup, generate, check).
//   - serveConfig (config.go): serve's flags, with Validate naming the bad
//     flag; serve (serve.go) runs a member with it.
//   - Snapshot support (snapshots.go): the snapshot store serve hands the
//     shard service, and `shards recover`.
//   - StatusResponse, QueryResponse (QueryEntry), ShardRow, MemberRow,
//     ReadMessage: the JSON shapes of /v1/status, /v1/query, `shards list -o
//     json`, `members list -o json`, `read -o json`; exported so Go programs
//     can decode them.
package daemon
