// Command consumerd runs a consumerd member (`consumerd serve`) and the client
// subcommands that manage and query a cluster (shards, members, publish,
// query); see DESIGN.md §7 for the contract and `consumerd --help`.
//
// All of it lives in package daemon; this main only registers the built-in
// applications (wordcount). A team with its own applications builds its own
// binary the same way: os.Exit(daemon.Main(myapp.App())).
//
// The package's tests are the multi-process suite: they build this binary,
// start Debian's etcd and the nats-server of go.mod (built from the module) on
// free ports, and run members as child
// processes — TestFaults (SIGKILL, SIGSTOP zombies, restarts, SIGTERM drain
// while a known corpus is published; exact word counts), TestClustersApart
// (two clusters under different etcd prefixes on one etcd and one NATS, each
// in its own WAL namespace), TestServeEmbedded
// (the embedded default, HTTP endpoints, promtool check metrics),
// TestServeShutdownBounds, TestCLIErrors, TestDeployMetricsServed (a live
// member serves every metric the deploy/ dashboard and alert rules name)
// with the checks of the deploy/ files themselves (deploy_test.go), and
// BenchmarkFailover.
package main
