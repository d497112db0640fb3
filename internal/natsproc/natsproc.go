// Package natsproc runs the nats-server of go.mod as a process of its own,
// for tests and benchmarks that must not count the broker's CPU as their
// own: it is built from the module once per test binary (the go build cache
// makes it quick) and started with JetStream on a free loopback port.
package natsproc

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/internal/freeport"
)

var build struct {
	once      sync.Once
	dir, path string
	err       error
}

// Binary returns the path of the go.mod nats-server, building it on first
// use. Cleanup removes it (call it from TestMain).
func Binary(tb testing.TB) string {
	tb.Helper()
	b := &build
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "consumerd-nats-server-"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "nats-server")
		if out, err := exec.Command("go", "build", "-o", b.path, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build github.com/nats-io/nats-server/v2: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		tb.Fatalf("building the go.mod nats-server: %v", b.err)
	}
	return b.path
}

// Cleanup removes what Binary built.
func Cleanup() {
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
}

// Start starts a JetStream nats-server process with its store in a test
// directory, waits until it accepts connections, and returns its URL and
// process id. t.Cleanup kills it.
func Start(tb testing.TB) (url string, pid int) {
	tb.Helper()
	return StartWith(tb, "-js", "-sd", filepath.Join(tb.TempDir(), "js"))
}

// StartWith starts the go.mod nats-server on a free loopback port with args
// added to its command line (e.g. no -js: a server without JetStream),
// waits until it accepts connections, and returns its URL and process id.
// t.Cleanup kills it.
func StartWith(tb testing.TB, args ...string) (url string, pid int) {
	tb.Helper()
	bin := Binary(tb)
	port := freeport.Port(tb)
	cmd := exec.Command(bin, append([]string{"-a", "127.0.0.1", "-p", fmt.Sprint(port)}, args...)...)
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start nats-server: %v", err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("nats-server at %s not accepting connections after 30s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a port: nothing to wait on
	}
	return "nats://" + addr, cmd.Process.Pid
}

// Main is a TestMain for packages that use Binary: it runs the tests,
// removes the built server, and fails a passing run that leaves goroutines
// behind (goleak, with opts).
func Main(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	Cleanup()
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
