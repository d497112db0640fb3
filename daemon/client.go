package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/wal"
)

// maxTxnOps is etcd's default --max-txn-ops: a txn holds at most this many ops.
const maxTxnOps = 128

// clientFlags are the connection flags every client subcommand takes.
type clientFlags struct {
	etcdEndpoints []string
	etcdPrefix    string
	walURL        string
	walNamespace  string
	// walReplicas is the replication of streams this command creates: the
	// cluster's (recordedReplicas), read by etcd().
	walReplicas int
	dialTimeout time.Duration
	// TLS and authentication (tls.go) of etcd, NATS and the members' HTTP
	// (used by the commands that call members: query, shards list; every
	// command takes them, so one set of flags fits every command).
	etcdSec, walSec connSecurity
	http            httpTLS
}

func (c *clientFlags) bind(fs *pflag.FlagSet) {
	fs.StringSliceVar(&c.etcdEndpoints, "etcd.endpoints", []string{"127.0.0.1:2379"}, "etcd endpoints, comma separated")
	fs.StringVar(&c.etcdPrefix, "etcd.prefix", "/consumerd", "root of consumerd's keys in etcd")
	fs.StringVar(&c.walURL, "wal.url", "nats://127.0.0.1:4222", "NATS URL(s) of the JetStream WAL, comma separated")
	fs.StringVar(&c.walNamespace, "wal.namespace", "", walNamespaceUsage)
	fs.DurationVar(&c.dialTimeout, "dial-timeout", 5*time.Second, "how long to try reaching etcd, NATS and members before giving up")
	c.etcdSec.bind(fs, "etcd")
	c.walSec.bind(fs, "wal")
	c.http.bind(fs, false)
}

// httpClient is the HTTP client of a command that calls members, each
// request bounded by timeout.
func (c *clientFlags) httpClient(timeout time.Duration) (*http.Client, error) {
	return c.http.client(timeout)
}

func (c *clientFlags) validate() error {
	if len(c.etcdEndpoints) == 0 {
		return usagef("--etcd.endpoints: must name at least one endpoint")
	}
	if !strings.HasPrefix(c.etcdPrefix, "/") || strings.HasSuffix(c.etcdPrefix, "/") {
		return usagef("--etcd.prefix: %q must start with '/' and not end with '/'", c.etcdPrefix)
	}
	if _, err := c.namespace(); err != nil {
		return usageError{err}
	}
	if c.dialTimeout <= 0 {
		return usagef("--dial-timeout: %s must be positive", c.dialTimeout)
	}
	for _, err := range []error{c.etcdSec.check(), c.walSec.check(), c.http.check()} {
		if err != nil {
			return usageError{err}
		}
	}
	return nil
}

// etcd connects to etcd and checks that it answers (dialEtcd).
func (c *clientFlags) etcd(ctx context.Context) (*clientv3.Client, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	cli, err := dialEtcd(ctx, hclog.NewNullLogger(), c.etcdEndpoints, c.etcdPrefix, c.dialTimeout, c.etcdSec, true)
	if err != nil {
		return nil, err
	}
	if err := c.followNamespace(ctx, cli); err != nil {
		cli.Close()
		return nil, err
	}
	if c.walReplicas, err = recordedReplicas(ctx, cli, c.etcdPrefix); err != nil {
		cli.Close()
		return nil, err
	}
	return cli, nil
}

// followNamespace makes the client use the WAL namespace the cluster
// recorded (claimNamespace), so it reads and writes the streams the members
// do: without --wal.namespace it takes the recorded one; a --wal.namespace
// that differs is an error naming both.
func (c *clientFlags) followNamespace(ctx context.Context, cli *clientv3.Client) error {
	key := namespaceKey(c.etcdPrefix)
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("reading the cluster's WAL namespace at %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil // no member has started yet: the derived namespace
	}
	rec := string(resp.Kvs[0].Value)
	if c.walNamespace != "" && c.walNamespace != rec {
		return usagef("--wal.namespace %q: the cluster under --etcd.prefix %s keeps its WAL in namespace %q (%s): drop the flag or pass that one",
			c.walNamespace, c.etcdPrefix, rec, key)
	}
	c.walNamespace = rec
	return nil
}

// snapshot connects to etcd and reads the whole keyspace once. The caller
// closes the returned client.
func (c *clientFlags) snapshot(ctx context.Context) (*clientv3.Client, allocator.Snapshot, error) {
	cli, err := c.etcd(ctx)
	if err != nil {
		return nil, allocator.Snapshot{}, err
	}
	snap, err := loadSnapshot(ctx, cli, c.etcdPrefix)
	if err != nil {
		cli.Close()
		return nil, allocator.Snapshot{}, err
	}
	return cli, snap, nil
}

// dialEtcd connects to etcd with sec's TLS and credentials
// (etcdClientConfig) and checks that it answers, by counting the key
// <prefix>/ping (under the prefix, so a role confined to it may read it):
// the client itself connects lazily, so an unreachable cluster would
// otherwise surface later as a hang. probeEtcd first fails at once when no
// endpoint can answer: a TLS handshake refused names why and the flag to
// set, and endpoints that all refuse the connection fail only when
// refusedIsFinal (a client command; serve, which may start before etcd
// does, waits instead, and waits out an etcd that answers but cannot serve
// the ping yet: startupEtcd, logging to log).
func dialEtcd(ctx context.Context, log hclog.Logger, endpoints []string, prefix string, timeout time.Duration, sec connSecurity, refusedIsFinal bool) (*clientv3.Client, error) {
	where := strings.Join(endpoints, ",")
	cfg, err := etcdClientConfig(ctx, endpoints, timeout, sec)
	if err != nil {
		return nil, err
	}
	if err := probeEtcd(ctx, endpoints, cfg.TLS, timeout, refusedIsFinal); err != nil {
		if errors.As(err, new(refusedError)) {
			return nil, fmt.Errorf("cannot reach etcd at %s: %w (is etcd running there? see --etcd.endpoints)", where, err)
		}
		return nil, fmt.Errorf("cannot reach etcd at %s: %w", where, err)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s", timeout)
		}
		return nil, fmt.Errorf("cannot reach etcd at %s: %w", where, withHint(err, etcdHint(err, cfg.Username, prefix)))
	}
	ping := func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := cli.Get(cctx, prefix+"/ping", clientv3.WithCountOnly())
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s", timeout)
		}
		return err
	}
	if refusedIsFinal {
		err = ping(ctx)
	} else { // serve: an etcd electing a leader is waited out
		err = startupEtcd(ctx, log, "reading "+prefix+"/ping", ping)
	}
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("cannot reach etcd at %s: %w", where, withHint(err, etcdHint(err, cfg.Username, prefix)))
	}
	return cli, nil
}

// namespace is the cluster's WAL namespace (--wal.namespace, or derived
// from --etcd.prefix).
func (c *clientFlags) namespace() (string, error) {
	return walNamespace(c.walNamespace, c.etcdPrefix)
}

// openWAL connects to the cluster's WAL: --wal.url, in its namespace.
func (c *clientFlags) openWAL(log hclog.Logger) (wal.Opener, error) {
	ns, err := c.namespace()
	if err != nil {
		return nil, usageError{err}
	}
	sec, err := c.walSec.natsSecurity()
	if err != nil {
		return nil, err
	}
	return openWAL(c.walURL, ns, max(c.walReplicas, 1), c.dialTimeout, sec, log)
}

// loadSnapshot reads the whole keyspace once.
func loadSnapshot(ctx context.Context, cli *clientv3.Client, prefix string) (allocator.Snapshot, error) {
	ks := allocator.NewKeySpace(cli, prefix, shard.DecodeSpec, hclog.NewNullLogger())
	if err := ks.Load(ctx); err != nil {
		return allocator.Snapshot{}, fmt.Errorf("reading %s/ from etcd: %w", prefix, err)
	}
	return ks.Snapshot(), nil
}

// ensureShards creates n shards of app when no shard of app exists; it
// returns how many it created.
func ensureShards(ctx context.Context, cli *clientv3.Client, prefix string, app shard.App, n int) (int, error) {
	snap, err := loadSnapshot(ctx, cli, prefix)
	if err != nil {
		return 0, err
	}
	for _, s := range shard.Specs(snap) {
		if s.App == app.Name {
			return 0, nil
		}
	}
	specs, err := app.SpecsFor(n, 0)
	if err != nil {
		return 0, err
	}
	if err := createSpecs(ctx, cli, prefix, specs); err != nil {
		return 0, err
	}
	return len(specs), nil
}

// createSpecs writes specs that must not exist yet, in txns of at most
// maxTxnOps keys, each guarded so that an existing shard is never overwritten.
func createSpecs(ctx context.Context, cli *clientv3.Client, prefix string, specs []*shard.Spec) error {
	for start := 0; start < len(specs); start += maxTxnOps {
		batch := specs[start:min(start+maxTxnOps, len(specs))]
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		for _, s := range batch {
			raw, err := json.Marshal(s)
			if err != nil {
				return fmt.Errorf("encoding shard %s: %w", s.ID, err)
			}
			key := allocator.ItemKey(prefix, s.ID)
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
			ops = append(ops, clientv3.OpPut(key, string(raw)))
		}
		resp, err := cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("writing shard specs to etcd: %w", err)
		}
		if !resp.Succeeded {
			var exist []string
			for _, s := range batch {
				g, err := cli.Get(ctx, allocator.ItemKey(prefix, s.ID), clientv3.WithCountOnly())
				if err == nil && g.Count > 0 {
					exist = append(exist, s.ID)
				}
			}
			return fmt.Errorf("shards already exist: %s (use 'shards apply' to change them)", strings.Join(exist, ", "))
		}
	}
	return nil
}
