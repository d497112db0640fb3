package jetstream

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/consumerd/consumerd/internal/natsconn"
)

// Config configures the JetStream backend.
type Config struct {
	// URL is the NATS server URL, or a comma-separated list of cluster URLs,
	// e.g. "nats://127.0.0.1:4222". Required.
	URL string
	// Namespace sets one cluster's channels apart from another's on the same
	// server: it begins every stream name ("<namespace>_<token>") and subject
	// ("<namespace>.<token>.data|fence"). [A-Za-z0-9-]+, not OBJ or KV (see
	// ValidNamespace); the daemon derives it from the etcd prefix with
	// NamespaceOf. Default DefaultNamespace ("consumerd").
	Namespace string
	// Replicas is the stream replication factor for new streams: 1 (default,
	// a single server) or 3 in production clusters.
	Replicas int
	// MemoryStorage stores new streams in memory instead of files (tests and
	// benchmarks only: nothing survives a server restart).
	MemoryStorage bool
	// DuplicateWindow is how long JetStream remembers a MutableMessage.DedupeID
	// (Nats-Msg-Id). Default DefaultDuplicateWindow.
	DuplicateWindow time.Duration
	// AckTimeout bounds the wait for the server's acknowledgement of an
	// append (an append unacknowledged for between 1 and 1.25 AckTimeout
	// fails, retryably; see the package doc); a whole Open has three times
	// as long (creating a replicated stream under load is slow). Default
	// 10 s: an append forwarded to a stream leader that was just cut off is
	// never answered (the connection itself is fine), and the chaos harness
	// saw publishes stall for the full 30 s the default used to be; a
	// retried append is deduplicated, so failing it sooner costs nothing.
	AckTimeout time.Duration
	// RequestTimeout bounds each other request (stream look-up and
	// creation, fence reads and writes, last id, truncation, scanner
	// start), also within a longer deadline of the caller's: a request sent
	// as its server died or lost its stream leader is never answered, and
	// failing it retryably lets the WAL adaptor send it again, to a server
	// that answers. Default 5 s.
	RequestTimeout time.Duration
	// MaxPending bounds unacknowledged appends per connection; further
	// appends block (backpressure). Default 4000.
	MaxPending int
	// MaxBatchesInFlight bounds the atomic batches a connection has in
	// flight; further batches wait for one to finish (see batch.go: the
	// server's cost is per batch, and waiting is what lets each chain's
	// next batch gather more). Default DefaultMaxBatchesInFlight.
	MaxBatchesInFlight int
	// ConnectTimeout bounds the initial connection. Default 5 s.
	ConnectTimeout time.Duration
	// ClientName names the connection on the server (monitoring). Default
	// "consumerd".
	ClientName string
	// Security is the connection's TLS configuration and credentials (the
	// zero value: plain, no credentials).
	Security natsconn.Security
	// Logger receives connection events (named "jetstream"); nil discards.
	Logger hclog.Logger
}

// Durability note: when an append is acknowledged is decided by the server,
// not by this client: a single server writes to its file store and fsyncs
// periodically unless started with sync_interval "always"
// (embednats.Config.SyncAlways); an R=3 stream acknowledges once a quorum has
// the message.

func (c Config) withDefaults() (Config, error) {
	if c.URL == "" {
		return c, fmt.Errorf("jetstream: Config.URL is required")
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if err := ValidNamespace(c.Namespace); err != nil {
		return c, fmt.Errorf("jetstream: Config.Namespace: %w", err)
	}
	switch {
	case c.Replicas == 0:
		c.Replicas = 1
	case c.Replicas < 0 || c.Replicas > 5:
		return c, fmt.Errorf("jetstream: Config.Replicas %d out of range 1..5", c.Replicas)
	}
	if c.DuplicateWindow <= 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = 10 * time.Second
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 5 * time.Second
	}
	if c.MaxPending <= 0 {
		c.MaxPending = 4000
	}
	if c.MaxBatchesInFlight <= 0 {
		c.MaxBatchesInFlight = DefaultMaxBatchesInFlight
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 5 * time.Second
	}
	if c.ClientName == "" {
		c.ClientName = "consumerd"
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c, nil
}

// DefaultDuplicateWindow is the duplicate window of the streams consumerd
// creates (JetStream's own default): a DedupeID is remembered this long.
const DefaultDuplicateWindow = 2 * time.Minute
