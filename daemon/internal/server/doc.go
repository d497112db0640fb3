// Package server is the member process, `serve`: it wires the other
// packages together and serves the member's HTTP endpoints.
//
// Run starts in order (start.go): the HTTP listener (the advertised
// endpoint is the address bound), the data directory's lock and instance id
// (datadir.go), etcd (embedded, or --etcd.endpoints, waited for), the
// cluster's WAL namespace and stream replication (recorded by the first
// member, checked by the others), the WAL (embedded nats-server, or
// --wal.url), the snapshot store, and on the embedded default the topics
// and shards of its apps. It then runs member sessions (loop.go,
// session.go): an allocator.Member whose items are shard.Specs plus a
// shard.Service that follows its assignments. A lost lease (the process was
// frozen past its TTL) tears the session down and the member rejoins under
// a new lease. A first signal marks the member exiting and the leader
// drains it make-before-break; a second signal, or --shutdown-timeout, cuts
// that short (exit 1). Everything started is torn down in reverse order.
//
// HTTP (http.go, query.go): /metrics (without etcd's own server metrics,
// which break Prometheus naming conventions: served at /metrics/etcd),
// /livez, /readyz (the etcd session is live, no local replica is FAILED,
// every local slot-0 replica is PRIMARY), /v1/status (api.StatusResponse,
// health.go), /v1/query (a shard's own answer, forwarded once to the
// shard's primary when it is elsewhere; or a query over the app through
// package query) and the status pages (package statuspage).
//
// Config (config.go) is serve's flags; Validate names every bad flag.
package server
