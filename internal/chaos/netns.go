package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Addresses. Every run uses the same private subnet: it exists only inside
// the run's own namespaces and on its own bridge, so two runs never meet.
// Each backend host has one address for etcd and one for NATS, so a fault can
// cut one service of a host and leave the other.
const (
	subnet     = "10.201.0.0/16"
	etcdNet    = "10.201.1.0/24"
	natsNet    = "10.201.2.0/24"
	memberNet  = "10.201.3.0/24"
	clientAddr = "10.201.4.1"
	nsPrefix   = "cdc" // namespaces, the bridge and veths of a run start with it
)

func etcdAddr(i int) string   { return fmt.Sprintf("10.201.1.%d", i+1) }
func natsAddr(i int) string   { return fmt.Sprintf("10.201.2.%d", i+1) }
func memberAddr(i int) string { return fmt.Sprintf("10.201.3.%d", i+1) }

// network is a run's hosts: one Linux network namespace each, joined by a
// bridge in the root namespace through veth pairs. The bridge has no
// address: nothing outside the run's namespaces is reachable from them, nor
// they from it.
type network struct {
	id     string // run id: part of every name, so leftovers are found by it
	bridge string
	hosts  map[string]*nsHost
	order  []string // host names in creation order
}

// nsHost is one namespace.
type nsHost struct {
	name  string // short host name: b1, m3, c
	ns    string // namespace name
	veth  string // root-side end of the host's veth (the host side is eth0)
	addrs []string
}

// ipCmd runs ip(8) with args and returns its error with its output.
func ipCmd(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// CanRun says whether this machine can build the run's network: root and
// ip(8) with network namespaces. The error says what is missing.
func CanRun() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root to create network namespaces (ip netns)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("needs ip(8) from iproute2 (Debian package iproute2)")
	}
	probe := fmt.Sprintf("%sprobe%d", nsPrefix, os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ipCmd(ctx, "netns", "add", probe); err != nil {
		return fmt.Errorf("cannot create a network namespace: %w", err)
	}
	_ = ipCmd(ctx, "netns", "del", probe)
	return nil
}

// newNetwork creates the namespaces of hosts (name → its addresses), the
// bridge and the links. On error what was made is removed.
func newNetwork(ctx context.Context, id string, hosts []hostAddrs) (_ *network, err error) {
	n := &network{id: id, bridge: nsPrefix + id, hosts: map[string]*nsHost{}}
	defer func() {
		if err != nil {
			n.teardown()
		}
	}()
	if err := ipCmd(ctx, "link", "add", n.bridge, "type", "bridge"); err != nil {
		return nil, err
	}
	if err := ipCmd(ctx, "link", "set", n.bridge, "up"); err != nil {
		return nil, err
	}
	for _, h := range hosts {
		host := &nsHost{name: h.name, ns: fmt.Sprintf("%s%s-%s", nsPrefix, id, h.name), veth: nsPrefix + id + h.name, addrs: h.addrs}
		n.hosts[h.name] = host
		n.order = append(n.order, h.name)
		if err := n.addHost(ctx, host, h.routes); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// hostAddrs is a host to create: its addresses (the first is its primary)
// and extra routes, each "PREFIX src ADDR": what a host with an address per
// service uses so that each service's connections leave from its own
// address (the address a fault cuts).
type hostAddrs struct {
	name   string
	addrs  []string
	routes [][2]string
}

func (n *network) addHost(ctx context.Context, h *nsHost, routes [][2]string) error {
	steps := [][]string{
		{"netns", "add", h.ns},
		{"link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
		{"link", "set", h.veth, "master", n.bridge},
		{"link", "set", h.veth, "up"},
		{"-n", h.ns, "link", "set", "lo", "up"},
	}
	for _, a := range h.addrs {
		steps = append(steps, []string{"-n", h.ns, "addr", "add", a + "/16", "dev", "eth0"})
	}
	steps = append(steps, []string{"-n", h.ns, "link", "set", "eth0", "up"})
	for _, r := range routes {
		steps = append(steps, []string{"-n", h.ns, "route", "add", r[0], "dev", "eth0", "src", r[1]})
	}
	for _, s := range steps {
		if err := ipCmd(ctx, s...); err != nil {
			return fmt.Errorf("host %s: %w", h.name, err)
		}
	}
	return nil
}

// command returns a command that runs bin in host's namespace, killed when
// ctx ends (ip netns exec execs bin, so the process killed is bin itself).
func (n *network) command(ctx context.Context, host, bin string, args ...string) *exec.Cmd {
	h := n.hosts[host]
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.ns, bin}, args...)...)
}

// blackhole drops, in host's namespace, every packet to prefix (add) or
// stops doing so (remove).
func (n *network) blackhole(ctx context.Context, host, prefix string, on bool) error {
	verb := "add"
	if !on {
		verb = "del"
	}
	return ipCmd(ctx, "-n", n.hosts[host].ns, "route", verb, "blackhole", prefix)
}

// silence drops, in host's namespace, every packet sent from addr: the
// service bound there answers nobody and reaches nobody, while the host's
// other addresses work.
func (n *network) silence(ctx context.Context, host, addr string, on bool) error {
	verb := "add"
	if !on {
		verb = "del"
	}
	return ipCmd(ctx, "-n", n.hosts[host].ns, "rule", verb, "from", addr, "priority", "100", "blackhole")
}

// link sets host's only link down or up.
func (n *network) link(ctx context.Context, host string, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return ipCmd(ctx, "-n", n.hosts[host].ns, "link", "set", "eth0", state)
}

// teardown kills whatever still runs in the run's namespaces and deletes
// them and the bridge (the veths go with their namespaces). It is safe to
// call twice and on a partly built network.
func (n *network) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range n.order {
		killNamespace(ctx, n.hosts[name].ns)
	}
	_ = ipCmd(ctx, "link", "del", n.bridge)
}

// killNamespace SIGKILLs every process in ns and deletes it.
func killNamespace(ctx context.Context, ns string) {
	out, _ := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = killPid(pid)
		}
	}
	_ = ipCmd(ctx, "netns", "del", ns)
}

// removeStale deletes the namespaces and bridges of earlier runs whose
// process is gone (a run killed before its teardown): a run's id is its
// process id in base 36.
func removeStale(ctx context.Context) {
	out, _ := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], nsPrefix) {
			continue
		}
		id, _, ok := strings.Cut(strings.TrimPrefix(f[0], nsPrefix), "-")
		if ok && !runAlive(id) {
			killNamespace(ctx, f[0])
		}
	}
	out, _ = exec.CommandContext(ctx, "ip", "-o", "link", "show", "type", "bridge").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name := strings.TrimSuffix(f[1], ":")
		if strings.HasPrefix(name, nsPrefix) && !runAlive(strings.TrimPrefix(name, nsPrefix)) {
			_ = ipCmd(ctx, "link", "del", name)
		}
	}
}

// runID is this process's run id.
func runID() string { return strconv.FormatInt(int64(os.Getpid()), 36) }

func runAlive(id string) bool {
	pid, err := strconv.ParseInt(id, 36, 64)
	if err != nil {
		return true // not ours to judge
	}
	if int(pid) == os.Getpid() {
		return true
	}
	_, err = os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}
