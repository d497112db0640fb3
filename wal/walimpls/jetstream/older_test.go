package jetstream_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
	"github.com/consumerd/consumerd/wal/walimpls/walimplstest"
)

// TestConformanceOlderServer runs the suite against Debian's nats-server
// (2.9 on bookworm): no atomic batches, so batches go one by one with dedupe
// ids. It skips when that binary is missing or is 2.12 or newer.
func TestConformanceOlderServer(t *testing.T) {
	bin := "/usr/sbin/nats-server"
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Skipf("no Debian nats-server at %s (make deps installs it): %v", bin, err)
	}
	version := strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(string(out), "nats-server:")), "v")
	if jetstream.AtomicBatchesIn(version) {
		t.Skipf("%s is %s: it has atomic batches", bin, version)
	}
	port := freeport.Port(t)
	cmd := exec.Command(bin, "-js", "-a", "127.0.0.1", "-p", fmt.Sprint(port), "-sd", filepath.Join(t.TempDir(), "js"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	waitfor.Until(t, 10*time.Second, "nats-server "+version+" to listen", func() (bool, string) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	if v := nc.ConnectedServerVersion(); jetstream.AtomicBatchesIn(v) {
		t.Fatalf("connected to %s, want an older server", v)
	}
	nc.Close()
	walimplstest.Run(t, func(t *testing.T) walimpls.OpenerBuilderImpls {
		return jetstream.NewBuilder(jetstream.Config{URL: url, Namespace: freshPrefix()})
	})
}
