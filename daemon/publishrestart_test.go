package daemon

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/consumerd/consumerd/internal/natsproc"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/shard"
)

// restartLines is the input size of the restart tests: the 300,000
// lines, or PUBLISH_RESTART_LINES (make test passes fewer).
func restartLines(t *testing.T) int {
	s := os.Getenv("PUBLISH_RESTART_LINES")
	if s == "" {
		return 300_000
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1000 {
		t.Fatalf("PUBLISH_RESTART_LINES=%q: want a count of lines, at least 1000", s)
	}
	return n
}

// inputLine is line i (from 1) of the restart tests' input.
func inputLine(i int) string { return fmt.Sprintf("line-%07d", i) }

// lineFeed writes n lines into a pipe that publish reads, counting the lines
// publish has read.
type lineFeed struct {
	r    *io.PipeReader
	read atomic.Int64
	done chan struct{} // closed when the writer goroutine has ended
}

func feedLines(n int) *lineFeed {
	r, w := io.Pipe()
	f := &lineFeed{r: r, done: make(chan struct{})}
	go func() { // ends at the last line, or when the reader is closed
		defer close(f.done)
		var b bytes.Buffer
		for i := 1; i <= n; i++ {
			b.WriteString(inputLine(i))
			b.WriteByte('\n')
			if b.Len() >= 32<<10 || i == n {
				if _, err := w.Write(b.Bytes()); err != nil {
					return
				}
				b.Reset()
			}
		}
		_ = w.Close()
	}()
	return f
}

func (f *lineFeed) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	f.read.Add(int64(bytes.Count(p[:n], []byte{'\n'})))
	return n, err
}

// stop ends the writer (publish ended early) and waits for it.
func (f *lineFeed) stop() {
	_ = f.r.Close()
	<-f.done
}

// bgPublish is `consumerd publish` running on its own goroutine.
type bgPublish struct {
	feed *lineFeed
	errb bytes.Buffer
	code int
	done chan struct{}
}

func (c *harness) startPublish(n int, args ...string) *bgPublish {
	p := &bgPublish{feed: feedLines(n), done: make(chan struct{})}
	args = append(args, "--etcd.endpoints", c.etcd, "--wal.url", c.nats)
	go func() { // ends with the command (bounded by its --timeout)
		defer close(p.done)
		p.code = Run(c.t.Context(), args, Options{Apps: c.apps, Stdin: p.feed, Stdout: io.Discard, Stderr: &p.errb})
	}()
	c.t.Cleanup(func() { p.feed.stop(); <-p.done })
	return p
}

// awaitRead waits until publish has read n lines; it fails at once if
// publish ended.
func (p *bgPublish) awaitRead(t *testing.T, n int64) {
	t.Helper()
	waitfor.Until(t, 3*time.Minute, fmt.Sprintf("publish to read %d lines", n), func() (bool, string) {
		select {
		case <-p.done:
			t.Fatalf("publish ended (exit %d) after reading %d lines: %s", p.code, p.feed.read.Load(), p.errb.String())
		default:
		}
		got := p.feed.read.Load()
		return got >= n, fmt.Sprintf("%d lines read", got)
	})
}

// wait waits for publish to end and returns its exit code.
func (p *bgPublish) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(limit):
		t.Fatalf("publish still running after %s; read %d lines", limit, p.feed.read.Load())
		return 0
	}
}

// checkStoredOnce reads topic back and fails unless it holds lines 1..n of
// the input, each exactly once.
func (c *harness) checkStoredOnce(topicName string, n int) {
	c.t.Helper()
	out := c.ok("", "read", "--topic", topicName, "-o", "lines")
	seen := make([]int, n+1)
	extra := 0
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		k, _, _ := strings.Cut(l, "\t")
		i, err := strconv.Atoi(strings.TrimPrefix(k, "line-"))
		if err != nil || i < 1 || i > n || k != inputLine(i) {
			extra++
			continue
		}
		seen[i]++
	}
	var missing, twice []int
	for i := 1; i <= n; i++ {
		switch {
		case seen[i] == 0:
			missing = append(missing, i)
		case seen[i] > 1:
			twice = append(twice, i)
		}
	}
	if len(missing) > 0 || len(twice) > 0 || extra > 0 {
		c.t.Fatalf("topic %s: %d lines missing (first %v), %d stored more than once (first %v), %d unexpected; want each of %d once",
			topicName, len(missing), head(missing), len(twice), head(twice), extra, n)
	}
}

func head(xs []int) []int { return xs[:min(len(xs), 5)] }

// debianNATS is Debian's nats-server (2.9 on bookworm), or skips.
func debianNATS(t *testing.T) string {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		bin = "/usr/sbin/nats-server"
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Skipf("no Debian nats-server (looked for nats-server on PATH and %s; make deps installs it): %v", bin, err)
	}
	t.Logf("Debian nats-server: %s %s", bin, strings.TrimSpace(string(out)))
	return bin
}

// TestPublishThroughRestarts (issue 35): `consumerd publish` of N lines
// while its nats-server process (real, on its own store) is stopped and
// started again twice — SIGTERM on the go.mod's server and on Debian's 2.9,
// SIGKILL on a server with sync_interval: always — ends with exit 0, and
// the topic holds every line exactly once.
func TestPublishThroughRestarts(t *testing.T) {
	n := restartLines(t)
	etcd := strings.Join(etcdtest.StartServer(t), ",")
	cases := []struct {
		name string
		sig  syscall.Signal
		bin  func(t *testing.T) string
		args func(dir string) []string
	}{
		{"gomod-SIGTERM", syscall.SIGTERM, func(t *testing.T) string { return natsproc.Binary(t) },
			func(dir string) []string { return []string{"-js", "-sd", dir} }},
		{"debian-SIGTERM", syscall.SIGTERM, debianNATS,
			func(dir string) []string { return []string{"-js", "-sd", dir} }},
		{"gomod-SIGKILL-sync-always", syscall.SIGKILL, func(t *testing.T) string { return natsproc.Binary(t) },
			func(dir string) []string {
				conf := filepath.Join(dir, "nats.conf")
				body := fmt.Sprintf("jetstream {\n  store_dir: %q\n  sync_interval: always\n}\n", filepath.Join(dir, "js"))
				if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
					panic(err)
				}
				return []string{"-c", conf}
			}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bin := tc.bin(t)
			srv := natsproc.StartServer(t, bin, tc.args(t.TempDir())...)
			c := &harness{t: t, etcd: etcd, nats: srv.URL(), apps: []shard.App{wordcount.App()}}
			topicName := fmt.Sprintf("restart%d", i)
			c.ok("", "topics", "create", "--name", topicName, "--partitions", "4")
			start := time.Now()
			p := c.startPublish(n, "publish", "--topic", topicName, "--timeout", "5m")
			for k, at := range []int64{int64(n) / 4, int64(n) / 2} {
				p.awaitRead(t, at)
				srv.Stop(tc.sig)
				srv.Start()
				t.Logf("restart %d (%v) after %d lines read, %v in", k+1, tc.sig, at, time.Since(start).Round(time.Millisecond))
			}
			if code := p.wait(t, 6*time.Minute); code != 0 {
				t.Fatalf("publish through two restarts: exit %d: %s", code, p.errb.String())
			}
			t.Logf("%d lines published through two restarts in %v", n, time.Since(start).Round(time.Millisecond))
			c.checkStoredOnce(topicName, n)
		})
	}
}

// TestPublishFailureNamesRunID: with its nats-server gone for longer than
// --timeout, publish exits 1 saying how many lines are known stored and
// giving its run id; re-running the same input with --id RUN once the
// server is back stores every line exactly once.
func TestPublishFailureNamesRunID(t *testing.T) {
	const n = 20_000
	srv := natsproc.StartServer(t, natsproc.Binary(t), "-js", "-sd", t.TempDir())
	c := &harness{t: t, etcd: strings.Join(etcdtest.StartServer(t), ","), nats: srv.URL(), apps: []shard.App{wordcount.App()}}
	c.ok("", "topics", "create", "--name", "t", "--partitions", "4")
	const timeout = 5 * time.Second
	p := c.startPublish(n, "publish", "--topic", "t", "--timeout", timeout.String())
	p.awaitRead(t, n/4)
	srv.Stop(syscall.SIGTERM)
	code := p.wait(t, timeout+10*time.Second)
	errs := p.errb.String()
	m := regexp.MustCompile(`(\d+) of (\d+) lines sent are known stored .*re-run the same input with --id (\S+) within 2m0s`).FindStringSubmatch(errs)
	if code != 1 || m == nil || !strings.Contains(errs, "--timeout "+timeout.String()+" passed") {
		t.Fatalf("publish with the server gone: exit %d, stderr %q; want exit 1 naming --timeout, the lines known stored and the run id", code, errs)
	}
	t.Logf("failed run: %s of %s lines known stored, run id %s; stderr:\n%s", m[1], m[2], m[3], errs)
	p.feed.stop()

	srv.Start()
	var in strings.Builder
	for i := 1; i <= n; i++ {
		in.WriteString(inputLine(i) + "\n")
	}
	c.ok(in.String(), "publish", "--topic", "t", "--id", m[3], "--timeout", "2m")
	c.checkStoredOnce("t", n)
}
