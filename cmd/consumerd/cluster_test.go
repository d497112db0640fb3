package main

// This file is the multi-process test harness: it builds the consumerd
// binary, starts Debian's etcd and nats-server binaries on free ports, and
// runs consumerd members and client subcommands as child processes.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/internal/natsproc"
	"github.com/consumerd/consumerd/internal/waitfor"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// consumerdBinary builds ./ (cmd/consumerd) into tb.TempDir(). The Go build
// cache makes every build after the first a link only.
func consumerdBinary(tb testing.TB) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "consumerd")
	out, err := exec.Command("go", "build", "-o", path, ".").CombinedOutput()
	if err != nil {
		tb.Fatalf("building consumerd: go build: %v\n%s", err, out)
	}
	return path
}

// natsServer returns the path of the go.mod nats-server, built from the
// module on first use (internal/natsproc).
func natsServer(tb testing.TB) string { return natsproc.Binary(tb) }

// findBinary locates an external server binary or skips the test.
func findBinary(tb testing.TB, name string) string {
	tb.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/bin", "/usr/sbin", "/usr/local/bin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	tb.Skipf("%s binary not found (install it with `make deps`: Debian package %s); skipping the multi-process test", name, map[string]string{"etcd": "etcd-server", "nats-server": "nats-server", "promtool": "prometheus"}[name])
	return ""
}

// proc is a child process with its output in a log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func startProc(tb testing.TB, name, logPath string, env []string, bin string, args ...string) *proc {
	tb.Helper()
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		tb.Fatalf("%s: log file: %v", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		f.Close()
		tb.Fatalf("%s: starting %s: %v", name, bin, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p
}

func (p *proc) signal(sig syscall.Signal) {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL (after SIGCONT, in case it is stopped) and waits.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	p.signal(syscall.SIGCONT)
	<-p.done
}

func (p *proc) tail(n int) string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cluster is an external etcd and nats-server plus consumerd members.
type cluster struct {
	tb       testing.TB
	bin      string
	dir      string
	etcdURL  string
	natsURL  string
	leaseTTL time.Duration
	etcd     *proc
	nats     *proc
	client   *clientv3.Client
	// name and flags set a cluster apart from others on the same etcd and
	// NATS (see sibling): flags go to every member and client subcommand,
	// e.g. --etcd.prefix.
	name  string
	flags []string

	mu      sync.Mutex
	members map[string]*member
}

type member struct {
	id, zone string
	httpAddr string
	dataDir  string
	proc     *proc
	starts   int
}

func newCluster(tb testing.TB, leaseTTL time.Duration) *cluster {
	tb.Helper()
	return newClusterOn(tb, leaseTTL, natsServer(tb))
}

// newClusterOn is newCluster with the nats-server binary at natsBin.
func newClusterOn(tb testing.TB, leaseTTL time.Duration, natsBin string) *cluster {
	tb.Helper()
	etcdBin := findBinary(tb, "etcd")
	c := &cluster{tb: tb, bin: consumerdBinary(tb), dir: tb.TempDir(), leaseTTL: leaseTTL, members: map[string]*member{}}

	cport, pport := freeport.Port(tb), freeport.Port(tb)
	c.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", cport)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pport)
	c.etcd = startProc(tb, "etcd", filepath.Join(c.dir, "etcd.log"), nil, etcdBin,
		"--name", "test", "--data-dir", filepath.Join(c.dir, "etcd"),
		"--listen-client-urls", c.etcdURL, "--advertise-client-urls", c.etcdURL,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "test="+peer, "--log-level", "warn")
	tb.Cleanup(c.etcd.kill)

	nport := freeport.Port(tb)
	c.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", nport)
	c.nats = startProc(tb, "nats-server", filepath.Join(c.dir, "nats.log"), nil, natsBin,
		"-js", "-a", "127.0.0.1", "-p", fmt.Sprint(nport), "-sd", filepath.Join(c.dir, "nats"))
	tb.Cleanup(c.nats.kill)

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcdURL}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		tb.Fatalf("etcd client: %v", err)
	}
	tb.Cleanup(func() { _ = cli.Close() })
	c.client = cli
	waitfor.Until(tb, 30*time.Second, "etcd to serve", func() (bool, string) {
		if c.etcd.exited() {
			tb.Fatalf("etcd exited: %v\n%s", c.etcd.err, c.etcd.tail(20))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := cli.Get(ctx, "ping")
		return err == nil, fmt.Sprint(err)
	})
	waitfor.Until(tb, 30*time.Second, "nats-server to accept connections", func() (bool, string) {
		if c.nats.exited() {
			tb.Fatalf("nats-server exited: %v\n%s", c.nats.err, c.nats.tail(20))
		}
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", nport), time.Second)
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	})
	tb.Cleanup(c.stopMembers)
	return c
}

// sibling is another cluster on c's etcd and nats-server, told apart by
// flags (e.g. "--etcd.prefix", "/beta"), with members of its own under
// c.dir/name.
func (c *cluster) sibling(name string, flags ...string) *cluster {
	c.tb.Helper()
	s := &cluster{tb: c.tb, bin: c.bin, dir: filepath.Join(c.dir, name), etcdURL: c.etcdURL, natsURL: c.natsURL,
		leaseTTL: c.leaseTTL, etcd: c.etcd, nats: c.nats, client: c.client, name: name, flags: flags, members: map[string]*member{}}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		c.tb.Fatal(err)
	}
	c.tb.Cleanup(s.stopMembers)
	return s
}

// stopMembers kills every member, and logs their tails when the test failed.
func (c *cluster) stopMembers() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.members {
		if m.proc != nil {
			m.proc.kill()
		}
	}
	if c.tb.Failed() {
		for _, m := range c.members {
			if m.proc != nil {
				c.tb.Logf("---- log tail of member %s/%s%s ----\n%s", m.zone, m.id, c.label(), m.proc.tail(40))
			}
		}
	}
}

// label names a sibling cluster in log lines ("" for the first one).
func (c *cluster) label() string {
	if c.name == "" {
		return ""
	}
	return " of cluster " + c.name
}

// addMember registers a member (not started).
func (c *cluster) addMember(id, zone string) *member {
	m := &member{id: id, zone: zone, httpAddr: fmt.Sprintf("127.0.0.1:%d", freeport.Port(c.tb)), dataDir: filepath.Join(c.dir, "member-"+id)}
	c.mu.Lock()
	c.members[id] = m
	c.mu.Unlock()
	return m
}

// start starts (or restarts) a member process.
func (c *cluster) start(m *member) {
	c.tb.Helper()
	m.starts++
	m.proc = startProc(c.tb, "member "+m.id+c.label(), filepath.Join(c.dir, "member-"+m.id+".log"), nil, c.bin, c.serveArgs(m)...)
}

// serveArgs are the arguments of m's serve process.
func (c *cluster) serveArgs(m *member) []string {
	return append([]string{"serve",
		"--etcd.endpoints", c.etcdURL, "--wal.url", c.natsURL,
		"--etcd.lease-ttl", c.leaseTTL.String(),
		"--member.id", m.id, "--member.zone", m.zone,
		"--data-dir", m.dataDir, "--http.addr", m.httpAddr,
		"--log.level", "debug", "--shutdown-timeout", "20s"}, c.flags...)
}

// run runs a client subcommand with the cluster's endpoints and returns its
// stdout; a non-zero exit fails the test unless allowFail.
func (c *cluster) run(stdin []byte, args ...string) (string, error) {
	args = append(append(args, "--etcd.endpoints", c.etcdURL, "--wal.url", c.natsURL), c.flags...)
	cmd := exec.Command(c.bin, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("consumerd %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (c *cluster) mustRun(stdin []byte, args ...string) string {
	c.tb.Helper()
	out, err := c.run(stdin, args...)
	if err != nil {
		c.tb.Fatal(err)
	}
	return out
}

// shardRow mirrors `shards list -o json`.
type shardRow struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	Primary  string `json:"primary"`
	Replicas []struct {
		Member string `json:"member"`
		Zone   string `json:"zone"`
		Slot   int    `json:"slot"`
		State  string `json:"state"`
		Error  string `json:"error"`
	} `json:"replicas"`
	Lag map[string]int64 `json:"lag"`
}

func (c *cluster) shards() ([]shardRow, error) {
	out, err := c.run(nil, "shards", "list", "-o", "json")
	if err != nil {
		return nil, err
	}
	var rows []shardRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		return nil, fmt.Errorf("decoding shards list: %v: %q", err, out)
	}
	return rows, nil
}

// assignment is one decoded <prefix>/assign/<shard>/<zone>/<member>/<slot> key.
type assignment struct {
	shard, zone, member string
	slot                int
	state               string
}

// assignments reads the assignment keys directly from etcd (fast polling for
// the benchmark, no child process).
func (c *cluster) assignments(ctx context.Context) ([]assignment, error) {
	const prefix = "/consumerd/assign/"
	resp, err := c.client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []assignment
	for _, kv := range resp.Kvs {
		parts := strings.Split(strings.TrimPrefix(string(kv.Key), prefix), "/")
		if len(parts) != 4 {
			continue
		}
		var st struct {
			State string `json:"state"`
		}
		_ = json.Unmarshal(kv.Value, &st)
		var slot int
		fmt.Sscan(parts[3], &slot)
		out = append(out, assignment{shard: parts[0], zone: parts[1], member: parts[2], slot: slot, state: st.State})
	}
	return out, nil
}

// allPrimary reports whether every shard in rows is PRIMARY with wantReplicas
// consistent replicas.
func allPrimary(rows []shardRow, wantShards, wantReplicas int) (bool, string) {
	if len(rows) != wantShards {
		return false, fmt.Sprintf("%d shards listed, want %d", len(rows), wantShards)
	}
	for _, r := range rows {
		if r.Status != "PRIMARY" {
			return false, fmt.Sprintf("shard %s is %s", r.ID, r.Status)
		}
		n := 0
		for _, rep := range r.Replicas {
			if rep.State == "PRIMARY" || rep.State == "STANDBY" {
				n++
			}
		}
		if n < wantReplicas {
			return false, fmt.Sprintf("shard %s has %d consistent replicas, want %d", r.ID, n, wantReplicas)
		}
	}
	return true, ""
}

// httpGet fetches url and returns the body.
func httpGet(url string) (int, []byte, error) {
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.Bytes(), err
}
