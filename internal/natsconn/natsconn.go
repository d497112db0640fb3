package natsconn

import (
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

// Options are the connection options of a connection named name, with
// timeout bounding each connection attempt (0: 5 s); extra options follow
// them (and so override them).
func Options(name string, timeout time.Duration, extra ...nats.Option) []nats.Option {
	if timeout <= 0 {
		timeout = connectTimeout
	}
	return append([]nats.Option{
		nats.Name(name),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait),
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(MaxPingsOut),
	}, extra...)
}
