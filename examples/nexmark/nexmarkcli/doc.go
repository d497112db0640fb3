// Package nexmarkcli is the Nexmark daemon's client commands (cmd/nexmark):
// setup (the source topics, each query's topics and shards), generate
// (publish a run's events, resumable, then an end mark to every source
// partition) and check (compare each query's committed output with its
// model). They take consumerd's connection flags and run through
// daemon.Client.
//
// It is apart from package nexmark because it is the operator's side: it
// talks to a cluster (etcd, NATS) through the daemon's command framework,
// while nexmark is the benchmark itself — events, generator, queries and
// their models — which members run and which needs no daemon. It uses only
// nexmark's exported API.
//
// A run is recorded in etcd at <prefix>/nexmark/run (events, rate, seed,
// base time): generate refuses a different run on the same cluster, and
// check regenerates the recorded one.
//
// Essential function: Commands.
package nexmarkcli
