package natsproc

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/internal/waitfor"
)

// Server is a nats-server process that a test stops with a signal and
// starts again on the same port with the same arguments (so the same
// store): a broker restart as an operator or a crash makes it. Its output
// goes to a log file whose tail a failing test prints.
type Server struct {
	tb     testing.TB
	bin    string
	args   []string
	addr   string
	log    string
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// StartServer starts bin (Binary(tb) for the go.mod server) on a free
// loopback port with args added (e.g. "-js", "-sd", DIR, or "-c", FILE),
// waits until it accepts connections, and returns it. t.Cleanup kills it.
func StartServer(tb testing.TB, bin string, args ...string) *Server {
	tb.Helper()
	s := &Server{tb: tb, bin: bin, addr: fmt.Sprintf("127.0.0.1:%d", freeport.Port(tb)),
		log: filepath.Join(tb.TempDir(), "nats-server.log")}
	host, port, _ := net.SplitHostPort(s.addr)
	s.args = append([]string{"-a", host, "-p", port}, args...)
	tb.Cleanup(func() {
		s.kill()
		if tb.Failed() {
			s.printLogTail()
		}
	})
	s.Start()
	return s
}

// URL is the server's client URL.
func (s *Server) URL() string { return "nats://" + s.addr }

// Start starts the server (again) and waits until it accepts connections.
func (s *Server) Start() {
	s.tb.Helper()
	if s.cmd != nil {
		select {
		case <-s.exited:
		default:
			s.tb.Fatalf("nats-server at %s: Start while it runs", s.addr)
		}
	}
	f, err := os.OpenFile(s.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		s.tb.Fatal(err)
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		s.tb.Fatalf("start %s: %v", s.bin, err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) { // owned by the process: ends when it exits
		_ = cmd.Wait()
		f.Close()
		close(exited)
	}(s.exited)
	waitfor.Until(s.tb, 60*time.Second, "nats-server at "+s.addr+" to accept connections", func() (bool, string) {
		select {
		case <-s.exited:
			s.tb.Fatalf("nats-server at %s exited at start: %s", s.addr, cmd.ProcessState)
		default:
		}
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
}

// Stop sends sig (SIGTERM: a graceful shutdown; SIGKILL: a crash) and waits
// until the process has exited.
func (s *Server) Stop(sig syscall.Signal) {
	s.tb.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("signal %v to nats-server at %s: %v", sig, s.addr, err)
	}
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		s.tb.Fatalf("nats-server at %s still running 60s after %v", s.addr, sig)
	}
}

func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// printLogTail logs the end of the server's output.
func (s *Server) printLogTail() {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return
	}
	if i := len(b) - 4000; i > 0 {
		b = b[i:]
		b = b[bytes.IndexByte(b, '\n')+1:]
	}
	s.tb.Logf("nats-server at %s, end of its output:\n%s", s.addr, b)
}
