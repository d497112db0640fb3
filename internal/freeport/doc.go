// Package freeport picks TCP ports for tests that must name a port before
// the server that will listen on it starts (route ports of a NATS cluster, an
// embedded etcd's peer URL, a server restarted on the same address).
//
// The usual trick, listening on port 0 and closing, hands out a port from the
// kernel's ephemeral range: the range outgoing connections take their source
// ports from. Between the close and the server's bind, any connection on the
// machine (one cluster member dialing another, say) may be given that port as
// its source, and the server then fails with "address already in use". CI saw
// exactly that. Pick chooses below the ephemeral range instead, where the
// kernel never assigns ports by itself, and checks the port is free.
package freeport
