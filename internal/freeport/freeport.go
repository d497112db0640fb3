package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// lowest is the lowest port Pick hands out; below it live well-known and
// registered services a test machine may run.
const lowest = 20000

// ephemeralLow returns the first port of the kernel's ephemeral range
// (Linux's ip_local_port_range), or 0 when it cannot be read or leaves no
// room below it.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo < lowest+1000 {
		return 0
	}
	return lo
}

// given holds every port Pick returned in this process: a test picks
// several ports before it binds any, so a random pick must not repeat one
// (two picks once gave an embedded etcd the same client and peer port).
var (
	givenMu sync.Mutex
	given   = map[int]bool{}
)

// take records port as given; false if it was already.
func take(port int) bool {
	givenMu.Lock()
	defer givenMu.Unlock()
	if given[port] {
		return false
	}
	given[port] = true
	return true
}

// Pick returns a TCP port on 127.0.0.1 that is free now and outside the
// ephemeral range, so only another explicit choice can take it before the
// caller binds it, and that it never returned before in this process.
// Where the range is unknown it falls back to a port the kernel picks.
func Pick() (int, error) {
	hi := ephemeralLow()
	if hi == 0 {
		return kernelPick()
	}
	var last error
	for range 100 {
		port := lowest + rand.IntN(hi-lowest)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			last = err
			continue
		}
		_ = l.Close()
		if !take(port) {
			last = fmt.Errorf("port %d already given", port)
			continue
		}
		return port, nil
	}
	return 0, fmt.Errorf("freeport: no free port in [%d, %d) after 100 tries: %w", lowest, hi, last)
}

func kernelPick() (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("freeport: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if take(port) {
			return port, nil
		}
	}
	return 0, fmt.Errorf("freeport: the kernel gave 100 ports already given")
}

// Port is Pick for tests: it fails tb instead of returning an error.
func Port(tb testing.TB) int {
	tb.Helper()
	p, err := Pick()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// Addr returns "127.0.0.1:<port>" for a port from Pick, panicking when none
// is free; for examples, which have no testing.TB.
func Addr() string {
	p, err := Pick()
	if err != nil {
		panic(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}
