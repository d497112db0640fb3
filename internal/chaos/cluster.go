package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// backends is the number of backend hosts: each runs an etcd member and a
// nats-server, so etcd has a majority with one host cut off and R=3 streams
// keep a quorum with one nats-server gone.
const backends = 3

// Binaries is what a run executes.
type Binaries struct {
	Consumerd  string // consumerd, built from this module
	NatsServer string // nats-server, built from go.mod's module
	Etcd       string // etcd (Debian's etcd-server)
	StreamRm   string // internal/chaos/cmd/streamrm: the stream-recreate fault's `nats stream rm`
}

// cluster is the running system under test: the network, its services and
// the client host "c" that publishes and checks.
type cluster struct {
	net      *network
	bins     Binaries
	dir      string
	leaseTTL time.Duration
	etcd     []*service
	nats     []*service
	members  []*service

	mu       sync.Mutex
	overruns []string // client commands that outlived their bound: anomalies
}

func etcdName(i int) string   { return fmt.Sprintf("e%d", i+1) }
func natsName(i int) string   { return fmt.Sprintf("n%d", i+1) }
func memberName(i int) string { return fmt.Sprintf("m%d", i+1) }
func backendHost(i int) string {
	return fmt.Sprintf("b%d", i+1)
}

// zoneOf spreads members over two zones: m1, m3, m5 in za; m2, m4 in zb.
func zoneOf(i int) string { return []string{"za", "zb"}[i%2] }

// layout is the hosts of a run with members member hosts.
func layout(members int) []hostAddrs {
	var hs []hostAddrs
	for i := 0; i < backends; i++ {
		hs = append(hs, hostAddrs{
			name:   backendHost(i),
			addrs:  []string{etcdAddr(i), natsAddr(i)},
			routes: [][2]string{{etcdNet, etcdAddr(i)}, {natsNet, natsAddr(i)}},
		})
	}
	for i := 0; i < members; i++ {
		hs = append(hs, hostAddrs{name: memberName(i), addrs: []string{memberAddr(i)}})
	}
	return append(hs, hostAddrs{name: "c", addrs: []string{clientAddr}})
}

func (c *cluster) etcdEndpoints() string {
	var eps []string
	for i := 0; i < backends; i++ {
		eps = append(eps, etcdAddr(i)+":2379")
	}
	return strings.Join(eps, ",")
}

func (c *cluster) natsURLs() string {
	var urls []string
	for i := 0; i < backends; i++ {
		urls = append(urls, "nats://"+natsAddr(i)+":4222")
	}
	return strings.Join(urls, ",")
}

// startCluster builds the network and starts etcd, NATS and members members.
func startCluster(ctx context.Context, dir string, bins Binaries, members int, leaseTTL time.Duration) (_ *cluster, err error) {
	removeStale(ctx)
	n, err := newNetwork(ctx, runID(), layout(members))
	if err != nil {
		return nil, fmt.Errorf("building the network: %w", err)
	}
	c := &cluster{net: n, bins: bins, dir: dir, leaseTTL: leaseTTL}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	var peers []string
	for i := 0; i < backends; i++ {
		peers = append(peers, fmt.Sprintf("%s=http://%s:2380", etcdName(i), etcdAddr(i)))
	}
	for i := 0; i < backends; i++ {
		e := &service{name: etcdName(i), host: backendHost(i), bin: bins.Etcd, log: logPath(dir, etcdName(i)), args: []string{
			"--name", etcdName(i),
			"--data-dir", filepath.Join(dir, etcdName(i)),
			"--listen-client-urls", "http://" + etcdAddr(i) + ":2379",
			"--advertise-client-urls", "http://" + etcdAddr(i) + ":2379",
			"--listen-peer-urls", "http://" + etcdAddr(i) + ":2380",
			"--initial-advertise-peer-urls", "http://" + etcdAddr(i) + ":2380",
			"--initial-cluster", strings.Join(peers, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", "chaos-" + n.id,
		}}
		c.etcd = append(c.etcd, e)
		conf, err := c.writeNatsConf(i)
		if err != nil {
			return nil, err
		}
		c.nats = append(c.nats, &service{name: natsName(i), host: backendHost(i), bin: bins.NatsServer, log: logPath(dir, natsName(i)), args: []string{"-c", conf}})
	}
	for _, s := range append(append([]*service{}, c.etcd...), c.nats...) {
		if err := s.start(n); err != nil {
			return nil, err
		}
	}
	for i := 0; i < members; i++ {
		m := &service{name: memberName(i), host: memberName(i), bin: bins.Consumerd, log: logPath(dir, memberName(i)), args: c.serveArgs(i)}
		c.members = append(c.members, m)
	}
	return c, nil
}

// writeNatsConf writes nats-server i's configuration: clustered JetStream
// that fsyncs every append before acknowledging it.
func (c *cluster) writeNatsConf(i int) (string, error) {
	var routes []string
	for j := 0; j < backends; j++ {
		routes = append(routes, fmt.Sprintf("%q", "nats-route://"+natsAddr(j)+":6222"))
	}
	conf := fmt.Sprintf(`server_name: %s
listen: "%s:4222"
jetstream {
  store_dir: %q
  sync_interval: always
}
cluster {
  name: chaos
  listen: "%s:6222"
  routes: [%s]
}
`, natsName(i), natsAddr(i), filepath.Join(c.dir, natsName(i)+"-store"), natsAddr(i), strings.Join(routes, ", "))
	path := filepath.Join(c.dir, natsName(i)+".conf")
	return path, os.WriteFile(path, []byte(conf), 0o644)
}

func (c *cluster) serveArgs(i int) []string {
	return []string{"serve",
		"--data-dir", filepath.Join(c.dir, memberName(i)),
		"--etcd.endpoints", c.etcdEndpoints(),
		"--etcd.lease-ttl", c.leaseTTL.String(),
		"--wal.url", c.natsURLs(),
		"--wal.replicas", "3",
		"--member.id", memberName(i),
		"--member.zone", zoneOf(i),
		"--http.addr", memberAddr(i) + ":8080",
		"--app", "split,tally",
		"--shutdown-timeout", "30s",
	}
}

// stop kills every service and removes the network.
func (c *cluster) stop() {
	for _, s := range append(append(append([]*service{}, c.members...), c.nats...), c.etcd...) {
		s.kill()
	}
	c.net.teardown()
}

// client runs a consumerd client subcommand on the client host, bounded by
// timeout, and returns its stdout; the error carries its stderr.
func (c *cluster) client(ctx context.Context, timeout time.Duration, stdin []byte, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args = append(args, "--etcd.endpoints", c.etcdEndpoints(), "--wal.url", c.natsURLs())
	cmd := c.net.command(ctx, "c", c.bins.Consumerd, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &stdout, &stderr
	// A command that overruns its bound is asked for its goroutines
	// (SIGQUIT) before it is killed: where it hung is the finding.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 3 * time.Second
	if err := cmd.Run(); err != nil {
		what := "consumerd " + args[0] + " " + args[1]
		if ctx.Err() != nil {
			dump := filepath.Join(c.dir, fmt.Sprintf("hung-%s-%d.txt", args[0], time.Now().UnixNano()))
			_ = os.WriteFile(dump, stderr.Bytes(), 0o644)
			c.mu.Lock()
			c.overruns = append(c.overruns, fmt.Sprintf("%s overran %s (goroutines in %s)", what, timeout, dump))
			c.mu.Unlock()
			return stdout.Bytes(), fmt.Errorf("%s overran %s: %w (its goroutines: %s)", what, timeout, err, dump)
		}
		return stdout.Bytes(), fmt.Errorf("%s: %w: %s", what, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// shardRow and memberRow are the fields of `shards list -o json` and
// `members list -o json` the checker reads.
type shardRow struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	Error    string `json:"error"`
	Primary  string `json:"primary"`
	Replicas []struct {
		Member string `json:"member"`
		State  string `json:"state"`
		Error  string `json:"error"`
	} `json:"replicas"`
}

type memberRow struct {
	ID   string `json:"id"`
	Zone string `json:"zone"`
}

func (c *cluster) shards(ctx context.Context) ([]shardRow, error) {
	return clientJSON[shardRow](ctx, c, "shards")
}

func (c *cluster) memberList(ctx context.Context) ([]memberRow, error) {
	return clientJSON[memberRow](ctx, c, "members")
}

// clientJSON runs `<what> list -o json` on the client host and decodes it.
func clientJSON[T any](ctx context.Context, c *cluster, what string) ([]T, error) {
	out, err := c.client(ctx, 20*time.Second, nil, what, "list", "-o", "json")
	if err != nil {
		return nil, err
	}
	var rows []T
	if err := json.Unmarshal(out, &rows); err != nil {
		return nil, fmt.Errorf("%s list -o json: %w", what, err)
	}
	return rows, nil
}
