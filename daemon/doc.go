// Package daemon is the consumerd command line, for cmd/consumerd and for a
// team's own daemon with its own apps:
//
//	func main() { os.Exit(daemon.Main(myapp.App(), wordcount.App())) }
//
// Main and Run run the command line (`serve` and the client commands, as
// DESIGN.md §7 specifies them) and return the exit code: 0 ok, 1 an error
// (one line on stderr), 2 a usage error. Options set the binary's apps, its
// name, its streams and environment (tests), and extra client commands: a
// Command runs with a connected Client whose CreateTopic, ApplySpecs,
// ReadPartition and FollowPartition are the code paths of `topics create`,
// `shards apply` and `read` (cmd/nexmark's setup, generate and check are
// such commands). The JSON shapes of the HTTP endpoints and of -o json are
// in package daemon/api.
//
// # Layout
//
// This package only assembles the command tree; each job has a package of
// its own under internal/ (DESIGN.md §1):
//
//   - server: the member process, `serve` (start-up, member sessions,
//     shutdown, the HTTP endpoints);
//   - cli: the client commands;
//   - cluster: the view of the keyspace and the guarded writes the
//     commands make (rows, lag, shard specs, topics);
//   - query: the one route → gather → merge path of key and scan queries,
//     for the CLI and /v1/query;
//   - statuspage: the HTML status pages;
//   - connect: TLS and authentication, dialing etcd and NATS, the cluster's
//     recorded WAL namespace and replication, the snapshot store;
//   - cmdline: what every command shares (usage errors, exit codes,
//     environment mirrors, logging);
//   - buildinfo: the binary's version.
//
// Dependencies point down that list: server and cli use cluster, query and
// connect; nothing below imports what is above it.
package daemon
