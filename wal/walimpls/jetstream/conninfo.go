package jetstream

import "github.com/consumerd/consumerd/wal/walimpls"

var _ walimpls.ConnectionInfo = (*opener)(nil)

// ConnectedURL is the connected server's URL, password redacted ("" while
// disconnected).
func (o *opener) ConnectedURL() string { return o.nc.ConnectedUrlRedacted() }

// Connected reports whether the NATS connection is up (not reconnecting,
// not closed).
func (o *opener) Connected() bool { return o.nc.IsConnected() }
