// Package embedetcd runs a single-node etcd server in-process
// (go.etcd.io/etcd/server/v3/embed). The daemon uses it when no
// --etcd.endpoints are given, and tests use it through internal/etcdtest.
//
// Start configures the client URL, the peer URL and the data directory,
// routes etcd's zap logging (warnings and errors only) to an hclog.Logger,
// and waits until the server is ready to serve clients, with a timeout. A port
// that is already taken fails Start with an error naming the address.
package embedetcd
