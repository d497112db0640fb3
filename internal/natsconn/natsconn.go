package natsconn

import (
	"crypto/tls"
	"time"

	"github.com/nats-io/nats.go"
)

// Liveness of a connection: see the package doc.
const (
	PingInterval   = 2 * time.Second
	MaxPingsOut    = 3
	ReconnectWait  = 250 * time.Millisecond
	connectTimeout = 5 * time.Second
)

// Security is how a connection checks its server and proves who it is: the
// same for every connection of a process (the WAL's, the snapshot store's).
// The zero value is a plain connection without credentials (the embedded
// server on loopback).
type Security struct {
	// TLS, when set, makes every connection TLS with this configuration:
	// its RootCAs verify the server (nil: the system's roots) and its
	// Certificates are the client certificate a server with `verify: true`
	// asks for. Without it a server that requires TLS is still spoken to in
	// TLS, verified against the system's roots.
	TLS *tls.Config
	// User and Password authenticate with a user name and password (a
	// server's `authorization { users = [...] }`).
	User, Password string
	// CredsFile is a NATS credentials file (a user JWT and its NKey seed),
	// for a server in operator (JWT) mode; it is read at every (re)connect,
	// so a rotated file is picked up. At most one of User and CredsFile is
	// set (the daemon's flags check that).
	CredsFile string
}

// options are s's connection options.
func (s Security) options() []nats.Option {
	var opts []nats.Option
	if s.TLS != nil {
		opts = append(opts, nats.Secure(s.TLS))
	}
	if s.User != "" {
		opts = append(opts, nats.UserInfo(s.User, s.Password))
	}
	if s.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(s.CredsFile))
	}
	return opts
}

// Options are the connection options of a connection named name, with
// timeout bounding each connection attempt (0: 5 s) and sec its TLS and
// credentials; extra options follow them (and so override them).
func Options(name string, timeout time.Duration, sec Security, extra ...nats.Option) []nats.Option {
	if timeout <= 0 {
		timeout = connectTimeout
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait),
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(MaxPingsOut),
	}
	opts = append(opts, sec.options()...)
	return append(opts, extra...)
}
