// Package blackhole is a TCP relay for tests that can be cut: from then on it
// swallows every byte both ways while keeping the connections open, which is
// how a network partition looks to a client (requests hang until their
// deadline, nothing is refused). The chaos harness (internal/chaos) makes real
// partitions between network namespaces; this is the in-process stand-in
// for a package's own regression test.
package blackhole

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy relays connections to a target until Cut.
type Proxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

// New starts a proxy on a loopback port relaying to target (host:port); it
// is closed by tb.Cleanup.
func New(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target}
	p.wg.Add(1)
	go func() { // owned by p: ends when Close closes the listener
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Add(2)
			go p.relay(c, up)
			go p.relay(up, c)
		}
	}()
	tb.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut starts swallowing every byte, on open and new connections alike.
func (p *Proxy) Cut() { p.cut.Store(true) }

// Heal relays bytes again (what was swallowed is gone).
func (p *Proxy) Heal() { p.cut.Store(false) }

// relay copies from src to dst until src fails, dropping bytes once cut.
func (p *Proxy) relay(src, dst net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or closed: the peer or Close ended it
		}
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
