// Package natstest starts real, in-process nats-servers with JetStream for
// tests (via internal/embednats): each on its own free port and t.TempDir()
// store, shut down by t.Cleanup. Nothing is mocked: tests talk to the server
// over TCP with nats.go.
//
// Start returns just the client URL; StartServer returns the *embednats.Server
// and accepts options, for tests that restart a server on the same store
// directory (and, if they want clients to reconnect, the same port).
package natstest
