package server

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/internal/bytesize"
	"github.com/consumerd/consumerd/internal/ident"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/rocksmem"
)

// Config is the configuration of `serve`, one field per flag.
type Config struct {
	EtcdEndpoints []string
	EtcdPrefix    string
	LeaseTTL      time.Duration
	WALURL        string
	// WALNamespace names this cluster's streams, subjects and snapshot
	// bucket in NATS; empty derives it from EtcdPrefix (see connect.WALNamespace).
	WALNamespace string
	WALSync      string
	WALReplicas  int
	MemberID     string
	Zone         string
	Limit        int
	// LoadInterval is how often the member measures and reports its
	// primaries' load (0: never); Placement is "load" or "count".
	LoadInterval  time.Duration
	Placement     string
	DataDir       string
	HTTPAddr      string
	HTTPAdvertise string
	Apps          []string
	LogLevel      string
	LogFormat     string
	// SnapshotStore is "jetstream" (object store on the WAL's NATS), "dir"
	// (SnapshotDir) or "none".
	SnapshotStore string
	SnapshotDir   string
	// RocksDBMemory is the memory budget in bytes of all shard databases of
	// the member: their shared block cache, memtables charged to it.
	RocksDBMemory uint64

	ShutdownTimeout time.Duration

	// TLS and authentication (tls.go): of the etcd client, of every NATS
	// connection, and of the member's HTTP server and of its calls to
	// other members.
	Etcd connect.Security
	WAL  connect.Security
	HTTP connect.HTTPTLS

	// Embedded servers (used only when EtcdEndpoints / WALURL are empty).
	EmbeddedEtcdClientURL string
	EmbeddedEtcdPeerURL   string
	EmbeddedNATSAddr      string
	EmbeddedShards        int
}

func defaultMemberID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "member"
	}
	// Host names may hold characters that are not legal in ids.
	var b strings.Builder
	for _, r := range h {
		if r == '.' || r == '-' || r == '_' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		} else {
			b.WriteRune('_')
		}
	}
	return b.String()
}

// bindServeFlags registers serve's flags on fs with their defaults.
func (c *Config) Bind(fs *pflag.FlagSet, defaultApps []string) {
	fs.StringSliceVar(&c.EtcdEndpoints, "etcd.endpoints", nil, "etcd endpoints, comma separated; empty starts an embedded etcd")
	fs.StringVar(&c.EtcdPrefix, "etcd.prefix", "/consumerd", "root of consumerd's keys in etcd")
	fs.DurationVar(&c.LeaseTTL, "etcd.lease-ttl", 10*time.Second, "member lease TTL: a member that stops renewing it loses its shards after this long")
	fs.StringVar(&c.WALURL, "wal.url", "", "NATS URL(s) of the JetStream WAL, comma separated; empty starts an embedded nats-server with JetStream")
	fs.StringVar(&c.WALNamespace, "wal.namespace", "", connect.WALNamespaceUsage)
	fs.StringVar(&c.WALSync, "wal.sync", "default", "embedded JetStream fsync policy (an external server's is its own sync_interval): 'always' fsyncs every append before acknowledging it (survives power loss, costs an fsync per append batch); 'default' fsyncs every 2 minutes (survives process crashes only)")
	fs.IntVar(&c.WALReplicas, "wal.replicas", 1, "JetStream stream replicas for new channels (3 on a NATS cluster)")
	fs.StringVar(&c.MemberID, "member.id", defaultMemberID(), "member id, unique within its zone ([A-Za-z0-9._-]+)")
	fs.StringVar(&c.Zone, "member.zone", "local", "failure zone: a shard's replicas are spread across zones")
	fs.IntVar(&c.Limit, "member.limit", 1024, "most shard replicas this member holds")
	fs.DurationVar(&c.LoadInterval, "member.load-interval", shard.DefaultLoadInterval, "how often the member measures what its primaries cost and reports it in etcd for the leader's placement (0: never)")
	fs.StringVar(&c.Placement, "placement", "load", "how this member, while it leads, places primaries: 'load' hands hot primaries to standbys on less busy members (by the members' load reports; by count until they arrive) or 'count' (by count only)")
	fs.StringVar(&c.DataDir, "data-dir", "./consumerd-data", "directory for shard databases (and the embedded servers' data)")
	fs.StringVar(&c.HTTPAddr, "http.addr", "127.0.0.1:8080", "HTTP listen address: /metrics /livez /readyz /v1/status /v1/query; also the member's advertised endpoint")
	fs.StringVar(&c.HTTPAdvertise, "http.advertise", "", "URL other members and the CLI use to reach this member (default: http://<http.addr>, https:// with --http.cert, a wildcard host replaced by the host name)")
	fs.StringSliceVar(&c.Apps, "app", defaultApps, "applications whose topics and shards serve creates on the embedded default, comma separated (a member runs the shards of every application the binary knows)")
	fs.StringVar(&c.SnapshotStore, "snapshot.store", "jetstream", "where shard snapshots go: 'jetstream' (object store on the WAL's NATS), 'dir' (--snapshot.dir, e.g. a shared filesystem) or 'none' (no snapshots; the recovery logs are never truncated)")
	fs.StringVar(&c.SnapshotDir, "snapshot.dir", "", "directory of the snapshot store when --snapshot.store=dir")
	c.RocksDBMemory = rocksmem.DefaultBytes()
	fs.Var(bytesize.Flag{P: &c.RocksDBMemory}, "rocksdb.memory", "memory all shard databases of this member share, e.g. 512MiB or 4GiB: "+
		"one block cache (data, index and filter blocks) to which the memtables are charged, at most half of it; writes stall while memtables would take more "+
		"(default: a quarter of the machine's or cgroup's memory, between 256MiB and 16GiB)")
	fs.StringVar(&c.LogLevel, "log.level", "info", "log level: trace, debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log.format", "text", "log format: text or json")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 60*time.Second, "on SIGTERM/SIGINT, how long to wait for the shards to move elsewhere before exiting anyway (non-zero exit)")
	c.Etcd.Bind(fs, "etcd")
	c.WAL.Bind(fs, "wal")
	c.HTTP.Bind(fs, true)
	fs.StringVar(&c.EmbeddedEtcdClientURL, "embedded.etcd-client-url", "http://127.0.0.1:2379", "client URL of the embedded etcd")
	fs.StringVar(&c.EmbeddedEtcdPeerURL, "embedded.etcd-peer-url", "http://127.0.0.1:2380", "peer URL of the embedded etcd")
	fs.StringVar(&c.EmbeddedNATSAddr, "embedded.nats-addr", "127.0.0.1:4222", "listen address of the embedded nats-server")
	fs.IntVar(&c.EmbeddedShards, "embedded.shards", 4, "with embedded etcd, the partitions of each --app topic it creates, and so the shards of an app that has none (0: create none)")
}

// EmbeddedEtcd reports whether serve starts its own etcd.
func (c *Config) EmbeddedEtcd() bool { return len(c.EtcdEndpoints) == 0 }

// EmbeddedWAL reports whether serve starts its own nats-server.
func (c *Config) EmbeddedWAL() bool { return c.WALURL == "" }

// problems collects what is wrong with a configuration, each naming its
// flag.
type problems []error

func (p *problems) bad(flag, format string, args ...any) {
	*p = append(*p, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
}

func (p *problems) add(err error) {
	if err != nil {
		*p = append(*p, err)
	}
}

// Validate checks the configuration and names every bad flag, in flag
// order, as one error (nil when there are none).
func (c *Config) Validate() error {
	var p problems
	c.validateEtcd(&p)
	c.validateWAL(&p)
	c.validateMember(&p)
	c.validateSecurity(&p)
	c.validateProcess(&p)
	c.validateEmbedded(&p)
	if len(p) == 0 {
		return nil
	}
	msgs := make([]string, len(p))
	for i, e := range p {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

func (c *Config) validateEtcd(p *problems) {
	for _, ep := range c.EtcdEndpoints {
		if strings.TrimSpace(ep) == "" {
			p.bad("etcd.endpoints", "empty endpoint in list %q", strings.Join(c.EtcdEndpoints, ","))
		}
	}
	if !strings.HasPrefix(c.EtcdPrefix, "/") || strings.HasSuffix(c.EtcdPrefix, "/") {
		p.bad("etcd.prefix", "%q must start with '/' and not end with '/'", c.EtcdPrefix)
	} else if _, err := connect.WALNamespace(c.WALNamespace, c.EtcdPrefix); err != nil {
		p.add(err)
	}
	if c.LeaseTTL < time.Second || c.LeaseTTL%time.Second != 0 {
		p.bad("etcd.lease-ttl", "%s must be a whole number of seconds, at least 1s (etcd leases have second granularity)", c.LeaseTTL)
	}
}

func (c *Config) validateWAL(p *problems) {
	if c.WALURL != "" {
		for _, u := range strings.Split(c.WALURL, ",") {
			if _, err := url.Parse(strings.TrimSpace(u)); err != nil || !strings.Contains(u, "://") {
				p.bad("wal.url", "%q is not a URL like nats://host:4222", u)
			}
		}
	}
	if c.WALSync != "always" && c.WALSync != "default" {
		p.bad("wal.sync", "%q must be 'always' or 'default'", c.WALSync)
	} else if c.WALSync == "always" && !c.EmbeddedWAL() {
		p.bad("wal.sync", "'always' configures the embedded nats-server, and --wal.url names an external one: "+
			"set 'sync_interval: always' in that server's jetstream configuration instead, and drop --wal.sync")
	}
	if c.WALReplicas < 1 || c.WALReplicas > 5 {
		p.bad("wal.replicas", "%d must be between 1 and 5", c.WALReplicas)
	}
	switch c.SnapshotStore {
	case "jetstream", "none":
	case "dir":
		if c.SnapshotDir == "" {
			p.bad("snapshot.dir", "must be set when --snapshot.store=dir")
		}
	default:
		p.bad("snapshot.store", "%q must be 'jetstream', 'dir' or 'none'", c.SnapshotStore)
	}
}

func (c *Config) validateMember(p *problems) {
	if err := ident.Check(c.MemberID); err != nil {
		p.bad("member.id", "%v", err)
	}
	if err := ident.Check(c.Zone); err != nil {
		p.bad("member.zone", "%v", err)
	}
	if c.Limit < 0 {
		p.bad("member.limit", "%d must not be negative", c.Limit)
	}
	if c.LoadInterval < 0 {
		p.bad("member.load-interval", "%s must not be negative (0: no load reports)", c.LoadInterval)
	}
	if c.Placement != "load" && c.Placement != "count" {
		p.bad("placement", "%q must be 'load' or 'count'", c.Placement)
	}
	if c.DataDir == "" {
		p.bad("data-dir", "must not be empty")
	}
	if _, port, err := net.SplitHostPort(c.HTTPAddr); err != nil || port == "" {
		p.bad("http.addr", "%q is not host:port", c.HTTPAddr)
	}
	if c.HTTPAdvertise != "" {
		if u, err := url.Parse(c.HTTPAdvertise); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			p.bad("http.advertise", "%q is not a URL like http://host:8080", c.HTTPAdvertise)
		} else if u.Scheme == "http" && c.HTTP.Cert != "" {
			p.bad("http.advertise", "%q is http://, but --http.cert serves TLS: write https://", c.HTTPAdvertise)
		}
	}
}

// validateSecurity checks the TLS and authentication flags. The embedded
// servers are the loopback development default: they listen without TLS or
// authentication, so flags that secure the connection to them would protect
// nothing. They are refused rather than let look as if they did.
func (c *Config) validateSecurity(p *problems) {
	p.add(c.Etcd.Check())
	p.add(c.WAL.Check())
	p.add(c.HTTP.Check())
	if c.EmbeddedEtcd() && c.Etcd.Given() {
		p.bad("etcd.endpoints", "%s apply to an external etcd: give --etcd.endpoints (the embedded etcd listens on loopback without TLS or authentication)", c.Etcd.GivenFlags())
	}
	if c.EmbeddedWAL() && c.WAL.Given() {
		p.bad("wal.url", "%s apply to an external NATS server: give --wal.url (the embedded nats-server listens on loopback without TLS or authentication)", c.WAL.GivenFlags())
	}
}

func (c *Config) validateProcess(p *problems) {
	if len(c.Apps) == 0 {
		p.bad("app", "must name at least one application")
	}
	if hclog.LevelFromString(c.LogLevel) == hclog.NoLevel {
		p.bad("log.level", "%q must be one of trace, debug, info, warn, error", c.LogLevel)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		p.bad("log.format", "%q must be 'text' or 'json'", c.LogFormat)
	}
	if c.RocksDBMemory < rocksmem.MinBytes {
		p.bad("rocksdb.memory", "%s is below the minimum %s", bytesize.Format(c.RocksDBMemory), bytesize.Format(rocksmem.MinBytes))
	}
	if c.ShutdownTimeout <= 0 {
		p.bad("shutdown-timeout", "%s must be positive", c.ShutdownTimeout)
	}
}

func (c *Config) validateEmbedded(p *problems) {
	if c.EmbeddedEtcd() {
		for _, f := range []struct{ flag, url string }{{"embedded.etcd-client-url", c.EmbeddedEtcdClientURL}, {"embedded.etcd-peer-url", c.EmbeddedEtcdPeerURL}} {
			if pu, err := url.Parse(f.url); err != nil || pu.Host == "" || (pu.Scheme != "http" && pu.Scheme != "https") {
				p.bad(f.flag, "%q is not a URL like http://127.0.0.1:2379", f.url)
			}
		}
		if c.EmbeddedShards < 0 {
			p.bad("embedded.shards", "%d must not be negative", c.EmbeddedShards)
		}
	}
	if c.EmbeddedWAL() {
		if _, _, err := net.SplitHostPort(c.EmbeddedNATSAddr); err != nil {
			p.bad("embedded.nats-addr", "%q is not host:port", c.EmbeddedNATSAddr)
		}
	}
}

// advertiseURL is the endpoint announced for a listener bound at addr,
// serving scheme (http, or https with --http.cert).
func advertiseURL(flag, scheme string, addr net.Addr, hostname func() (string, error)) string {
	if flag != "" {
		return strings.TrimSuffix(flag, "/")
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return scheme + "://" + addr.String()
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := hostname(); err == nil && h != "" {
			host = h
		}
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}
