// Package etcdtest starts real, embedded etcd servers for tests: each call
// gets its own free loopback ports and a t.TempDir() data directory, and is
// shut down by t.Cleanup. Start returns a connected client; StartServer
// returns the endpoints (for tests that make their own clients, e.g. to
// simulate several processes).
package etcdtest
