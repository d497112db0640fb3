package connect

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/wal"
)

// ClientFlags are the connection flags every client command takes (the
// built-in ones and a custom daemon's Commands): where etcd and NATS are,
// the cluster's root and namespace, how long to try, and TLS and
// authentication for etcd, NATS and the members' HTTP.
type ClientFlags struct {
	EtcdEndpoints []string
	EtcdPrefix    string
	WALURL        string
	WALNamespace  string
	// WALReplicas is the replication of streams this command creates: the
	// cluster's (RecordedReplicas), read by Etcd.
	WALReplicas int
	DialTimeout time.Duration
	// TLS and authentication (tls.go) of etcd, NATS and the members' HTTP
	// (used by the commands that call members: query, shards list; every
	// command takes them, so one set of flags fits every command).
	EtcdSec, WALSec Security
	HTTP            HTTPTLS
}

// Bind registers the flags on fs with their defaults.
func (c *ClientFlags) Bind(fs *pflag.FlagSet) {
	fs.StringSliceVar(&c.EtcdEndpoints, "etcd.endpoints", []string{"127.0.0.1:2379"}, "etcd endpoints, comma separated")
	fs.StringVar(&c.EtcdPrefix, "etcd.prefix", "/consumerd", "root of consumerd's keys in etcd")
	fs.StringVar(&c.WALURL, "wal.url", "nats://127.0.0.1:4222", "NATS URL(s) of the JetStream WAL, comma separated")
	fs.StringVar(&c.WALNamespace, "wal.namespace", "", WALNamespaceUsage)
	fs.DurationVar(&c.DialTimeout, "dial-timeout", 5*time.Second, "how long to try reaching etcd, NATS and members before giving up")
	c.EtcdSec.Bind(fs, "etcd")
	c.WALSec.Bind(fs, "wal")
	c.HTTP.Bind(fs, false)
}

// HTTPClient is the HTTP client of a command that calls members, each
// request bounded by timeout.
func (c *ClientFlags) HTTPClient(timeout time.Duration) (*http.Client, error) {
	return c.HTTP.Client(timeout)
}

// Validate checks the flags' values (no file is read, nothing dialled); its
// errors are usage errors naming the flag.
func (c *ClientFlags) Validate() error {
	if len(c.EtcdEndpoints) == 0 {
		return cmdline.Usagef("--etcd.endpoints: must name at least one endpoint")
	}
	if !strings.HasPrefix(c.EtcdPrefix, "/") || strings.HasSuffix(c.EtcdPrefix, "/") {
		return cmdline.Usagef("--etcd.prefix: %q must start with '/' and not end with '/'", c.EtcdPrefix)
	}
	if _, err := c.Namespace(); err != nil {
		return cmdline.Usage(err)
	}
	if c.DialTimeout <= 0 {
		return cmdline.Usagef("--dial-timeout: %s must be positive", c.DialTimeout)
	}
	for _, err := range []error{c.EtcdSec.Check(), c.WALSec.Check(), c.HTTP.Check()} {
		if err != nil {
			return cmdline.Usage(err)
		}
	}
	return nil
}

// Etcd validates the flags, connects to etcd and checks that it answers
// (DialEtcd), then follows the cluster's recorded WAL namespace and stream
// replication. The caller closes the client.
func (c *ClientFlags) Etcd(ctx context.Context) (*clientv3.Client, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cli, err := DialEtcd(ctx, c.EtcdEndpoints, c.EtcdPrefix, c.DialTimeout, c.EtcdSec)
	if err != nil {
		return nil, err
	}
	if err := c.followNamespace(ctx, cli); err != nil {
		cli.Close()
		return nil, err
	}
	if c.WALReplicas, err = RecordedReplicas(ctx, cli, c.EtcdPrefix); err != nil {
		cli.Close()
		return nil, err
	}
	return cli, nil
}

// followNamespace makes the client use the WAL namespace the cluster
// recorded (ClaimNamespace), so it reads and writes the streams the members
// do: without --wal.namespace it takes the recorded one; a --wal.namespace
// that differs is an error naming both.
func (c *ClientFlags) followNamespace(ctx context.Context, cli *clientv3.Client) error {
	key := NamespaceKey(c.EtcdPrefix)
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("reading the cluster's WAL namespace at %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil // no member has started yet: the derived namespace
	}
	rec := string(resp.Kvs[0].Value)
	if c.WALNamespace != "" && c.WALNamespace != rec {
		return cmdline.Usagef("--wal.namespace %q: the cluster under --etcd.prefix %s keeps its WAL in namespace %q (%s): drop the flag or pass that one",
			c.WALNamespace, c.EtcdPrefix, rec, key)
	}
	c.WALNamespace = rec
	return nil
}

// Namespace is the cluster's WAL namespace (--wal.namespace, or derived
// from --etcd.prefix).
func (c *ClientFlags) Namespace() (string, error) {
	return WALNamespace(c.WALNamespace, c.EtcdPrefix)
}

// OpenWAL connects to the cluster's WAL: --wal.url, in its namespace, each
// try bounded by --dial-timeout (or by connectTimeout when it is shorter
// and positive: a command with a deadline of its own).
func (c *ClientFlags) OpenWAL(log hclog.Logger, connectTimeout time.Duration) (wal.Opener, error) {
	ns, err := c.Namespace()
	if err != nil {
		return nil, cmdline.Usage(err)
	}
	sec, err := c.WALSec.NATS()
	if err != nil {
		return nil, err
	}
	timeout := c.DialTimeout
	if connectTimeout > 0 {
		timeout = min(timeout, connectTimeout)
	}
	return OpenWAL(c.WALURL, ns, max(c.WALReplicas, 1), timeout, sec, log)
}
