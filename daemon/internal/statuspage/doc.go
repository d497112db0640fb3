// Package statuspage renders a member's status pages, GET / (the cluster:
// leader, members, every shard) and GET /shards/<id> (one shard's spec,
// replicas, progress and last snapshot): server-side html/template (every
// value escaped), no script and nothing fetched from elsewhere (a CSP forbids
// both), refreshed by the browser every 5 s.
//
// etcd holds only each replica's state, error and a stale applied id; lag,
// the last commit and snapshot figures live in the members. So a page is
// built from the member's view of etcd (Pages.View) plus every member's
// GET /v1/status, fetched in parallel with a short timeout each
// (status_peers.go); a member that does not answer is named on the page and
// its replicas show what etcd holds. status_view.go builds the pages' data
// (pure: no I/O, the time passed in, table-tested); templates/ renders it.
package statuspage
