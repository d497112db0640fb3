// Package chaos is consumerd's chaos harness, after Jepsen: a nemesis, a
// workload and a checker, against the production binaries on a network of
// Linux namespaces the run makes itself.
//
// The network (netns.go): one namespace per host, joined through veth pairs
// to a bridge that has no address, so nothing outside the run is reachable.
// Three backend hosts b1..b3 each run an etcd member and a nats-server
// (JetStream cluster, R=3 streams, sync_interval: always), each service on
// its own address (10.201.1.i for etcd, 10.201.2.i for NATS) so a fault can
// cut one service of a host and leave the other; consumerd members m1..m5
// (10.201.3.j) in two zones; the client host c (10.201.4.1) publishes and
// checks through consumerd's own client commands. Everything is torn down at
// the end, on an error and on SIGINT/SIGTERM; a run killed outright leaves
// namespaces named after its process id, which the next run removes.
//
// The nemesis (nemesis.go): Schedule, a pure function of the seed, draws
// every fault kind once in a random order (plus extras) with targets and
// holds. Partitions are blackhole routes (toward a service's subnet) and
// blackhole rules (from a service's address); processes are SIGKILLed,
// SIGSTOPped past the lease and SIGTERMed; links flap down and up; a
// stream of the input topic is deleted underneath consumerd (loss.go: its
// batch comes after, the shard reading it must go FAILED, the heal is
// `shards accept-source --from start`).
//
// The workload (workload.go): the split → tally pipeline, fed batches of
// lines with `consumerd publish --id`, so retrying a batch stores nothing
// twice. A batch is published while each fault is held.
//
// The checker (check.go): after each heal, tally's counts (query --all)
// must equal the model of every acknowledged line; the time from the heal
// to exact counts is the fault's recovery time. At the end the tokens topic
// must hold each token occurrence exactly once, each token's last totals
// message must be its count, every shard must be PRIMARY with its standbys
// caught up, every member registered and every service running. A client
// command that overruns its bound is an anomaly too (its goroutine dump is
// kept). Run returns a Report; Report.Line is the CHAOS line.
//
// cmd/chaos is `make chaos`; TestChaosShort is make test's fixed-seed run.
package chaos
