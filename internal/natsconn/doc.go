// Package natsconn is how consumerd connects to NATS: one set of connection
// options for every connection a member or a client command makes (the WAL's
// and the snapshot store's), so they fail over alike and present the same
// TLS configuration and credentials (Security).
//
// The options that matter under faults:
//   - reconnect forever, 250 ms apart: a member outlives any NATS outage;
//   - ping every 2 s and give up on a server after 3 unanswered pings: a
//     server that is cut off without closing the connection (a partition,
//     a host gone) is left within about 8 s for another server of the URL
//     list. nats.go's default (a ping every 2 minutes, 2 outstanding) leaves
//     a connection to a silent server looking healthy for 4 minutes, and
//     every request and append on it waits out its timeout.
package natsconn
