package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// TestPipelineOlderServer runs the pipeline on Debian's nats-server (2.9 on
// bookworm: no atomic batches): serve says so in a WARN at start, outputs
// go one by one with dedupe ids, and a member killed and restarted midway
// (recovering well within the duplicate window) still leaves tokens and
// tally exact.
func TestPipelineOlderServer(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	bin := findBinary(t, "nats-server")
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Skipf("%s --version: %v", bin, err)
	}
	version := strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(string(out), "nats-server:")), "v")
	if jetstream.AtomicBatchesIn(version) {
		t.Skipf("%s is %s, which has atomic batches: no older server to test", bin, version)
	}
	const parts = 2
	c := newClusterOn(t, 2*time.Second, bin)
	for _, tp := range []string{"lines", "tokens", "totals"} {
		c.mustRun(nil, "topics", "create", "--name", tp, "--partitions", fmt.Sprint(parts))
	}
	c.mustRun(nil, "shards", "create", "--app", "split")
	c.mustRun(nil, "shards", "create", "--app", "tally")
	m := c.addMember("m1", "zone-a")
	c.start(m)
	waitfor.Until(t, 60*time.Second, "the pipeline's shards PRIMARY", func() (bool, string) {
		rows, err := c.shards()
		if err != nil {
			return false, err.Error()
		}
		return allPrimary(rows, 2*parts, 1)
	})
	log, err := os.ReadFile(m.proc.log)
	if err != nil || !strings.Contains(string(log), "the NATS server has no atomic batches") {
		t.Fatalf("serve on nats-server %s did not warn about atomic batches (%v):\n%s", version, err, m.proc.tail(40))
	}

	lines, counts := corpus(3000)
	want := renderCounts(counts)
	publish := func(from, to int) {
		data := []byte(strings.Join(lines[from:to], "\n") + "\n")
		c.mustRun(data, "publish", "--topic", "lines", "--id", fmt.Sprintf("older-%d", from))
	}
	publish(0, 1500)
	t.Logf("SIGKILL m1")
	m.proc.kill()
	c.start(m)
	publish(1500, 3000)
	waitfor.Until(t, 60*time.Second, "tally to equal the corpus", func() (bool, string) {
		out, err := c.run(nil, "query", "--app", "tally", "--all")
		if err != nil {
			return false, err.Error()
		}
		return out == want, diffCounts(out, want)
	})
	checkTokens(t, c, counts)
}
