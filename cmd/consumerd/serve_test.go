package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/internal/waitfor"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestServeEmbedded runs `consumerd serve` on the embedded default (its own
// etcd and nats-server, here on free ports), which creates the wordcount
// shards by itself; it publishes, queries, checks /livez, /readyz,
// /v1/status, validates /metrics with `promtool check metrics`, and checks
// that SIGTERM on a lone member exits 0 promptly.
func TestServeEmbedded(t *testing.T) {
	bin := consumerdBinary(t)
	dir := t.TempDir()
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", freeport.Port(t))
	natsAddr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	p := startProc(t, "serve", filepath.Join(dir, "serve.log"), nil, bin, "serve",
		"--data-dir", filepath.Join(dir, "data"), "--http.addr", httpAddr,
		"--embedded.etcd-client-url", etcdURL,
		"--embedded.etcd-peer-url", fmt.Sprintf("http://127.0.0.1:%d", freeport.Port(t)),
		"--embedded.nats-addr", natsAddr, "--member.id", "solo", "--etcd.lease-ttl", "3s")
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("serve log:\n%s", p.tail(60))
		}
	})
	base := "http://" + httpAddr

	if code, body, err := waitHTTP(t, p, base+"/livez"); err != nil || code != 200 || strings.TrimSpace(string(body)) != "ok" {
		t.Fatalf("/livez: %d %q %v", code, body, err)
	}
	// The embedded default sets up every app of the binary: wordcount,
	// split and tally, 4 shards each.
	const embeddedShards = 12
	waitfor.Until(t, 60*time.Second, "/readyz 200 (12 shards PRIMARY)", func() (bool, string) {
		if p.exited() {
			t.Fatalf("serve exited: %v\n%s", p.err, p.tail(30))
		}
		code, body, err := httpGet(base + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		if code != 200 {
			return false, fmt.Sprintf("%d %s", code, body)
		}
		var st struct {
			Replicas []struct {
				Shard, State string
			}
		}
		_, sb, err := httpGet(base + "/v1/status")
		if err != nil || json.Unmarshal(sb, &st) != nil {
			return false, fmt.Sprintf("/v1/status: %v %s", err, sb)
		}
		if len(st.Replicas) != embeddedShards {
			return false, fmt.Sprintf("%d replicas in /v1/status, want %d", len(st.Replicas), embeddedShards)
		}
		return true, ""
	})

	client := func(stdin string, args ...string) (string, error) {
		args = append(args, "--etcd.endpoints", etcdURL, "--wal.url", "nats://"+natsAddr)
		cmd := exec.Command(bin, args...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err != nil {
			return out.String(), fmt.Errorf("%v: %s", err, errb.String())
		}
		return out.String(), nil
	}
	if _, err := client("the cat\nthe dog\na cat\n", "publish", "--topic", "words"); err != nil {
		t.Fatalf("publish: %v", err)
	}
	// Bad input: a topic no shard reads, an unreachable NATS (named).
	if _, err := client("x\n", "publish", "--topic", "nope"); err == nil || !strings.Contains(err.Error(), `topic "nope" does not exist`) {
		t.Errorf("publish to an unknown topic: %v", err)
	}
	deadNATS := fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t))
	cmd := exec.Command(bin, "publish", "--topic", "words", "--etcd.endpoints", etcdURL, "--wal.url", deadNATS, "--dial-timeout", "1s")
	cmd.Stdin = strings.NewReader("x\n")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), deadNATS) || !strings.Contains(string(out), "NATS") {
		t.Errorf("publish with NATS down: %v: %s", err, out)
	}
	want := "a 1\ncat 2\ndog 1\nthe 2\n"
	waitfor.Until(t, 30*time.Second, "counts of the published lines", func() (bool, string) {
		out, err := client("", "query", "--app", "wordcount", "--all")
		if err != nil {
			return false, err.Error()
		}
		if out == want {
			return true, ""
		}
		_, per, _ := httpGet(base + "/v1/query?app=wordcount&all=1")
		return false, fmt.Sprintf("got %q want %q; per shard: %s", out, want, per)
	})
	if out, err := client("", "query", "--app", "wordcount", "--key", "cat"); err != nil || out != "2\n" {
		t.Fatalf("query --key cat: %q %v", out, err)
	}
	// The pipeline: lines -> split -> tokens -> tally, exactly once.
	if _, err := client("the cat\nthe dog\na cat\n", "publish", "--topic", "lines"); err != nil {
		t.Fatalf("publish lines: %v", err)
	}
	waitfor.Until(t, 30*time.Second, "tally of the published lines", func() (bool, string) {
		out, err := client("", "query", "--app", "tally", "--all")
		return err == nil && out == want, fmt.Sprintf("%q %v", out, err)
	})
	if out, err := client("", "query", "--app", "tally", "--key", "the"); err != nil || out != "2\n" {
		t.Fatalf("query --app tally --key the: %q %v", out, err)
	}
	if out, err := client("", "read", "--topic", "tokens"); err != nil || strings.Count(out, "\n") != 6 {
		t.Fatalf("read --topic tokens: %q %v, want the 6 tokens", out, err)
	}
	// The JSON shapes scripts rely on (DESIGN §7), key for key.
	keysOf := func(m map[string]any) string {
		ks := make([]string, 0, len(m))
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return strings.Join(ks, ",")
	}
	out, err := client("", "shards", "list", "-o", "json")
	var shardsJSON []map[string]any
	if err != nil || json.Unmarshal([]byte(out), &shardsJSON) != nil || len(shardsJSON) != embeddedShards {
		t.Fatalf("shards list -o json: %v %s", err, out)
	}
	if got := keysOf(shardsJSON[0]); got != "id,lag,primary,primary_zone,replicas,status" {
		t.Errorf("shards list keys: %s", got)
	}
	if reps, _ := shardsJSON[0]["replicas"].([]any); len(reps) != 1 || keysOf(reps[0].(map[string]any)) != "member,slot,state,zone" {
		t.Errorf("shards list replicas: %v", shardsJSON[0]["replicas"])
	}
	var wc0 map[string]any
	for _, row := range shardsJSON {
		if row["id"] == "wordcount-0000" {
			wc0 = row
		}
	}
	if lag, _ := wc0["lag"].(map[string]any); lag["words/0000"] != 0.0 {
		t.Errorf("shards list lag of wordcount-0000: %v, want words/0000: 0", wc0["lag"])
	}
	out, err = client("", "members", "list", "-o", "json")
	var membersJSON []map[string]any
	if err != nil || json.Unmarshal([]byte(out), &membersJSON) != nil || len(membersJSON) != 1 {
		t.Fatalf("members list -o json: %v %s", err, out)
	}
	if got := keysOf(membersJSON[0]); got != "endpoint,exiting,id,item_limit,leader,zone" {
		t.Errorf("members list keys: %s", got)
	}
	if membersJSON[0]["id"] != "solo" || membersJSON[0]["leader"] != true || membersJSON[0]["endpoint"] != base {
		t.Errorf("members list: %v", membersJSON[0])
	}

	// shards apply (an update and a new shard) and shards unassign (twice in
	// a row: the replica restarts on the same member) keep the state.
	specFile := filepath.Join(dir, "specs.yaml")
	// A source must be a partition of an existing topic.
	if err := os.WriteFile(specFile, []byte("- {id: wordcount-0004, app: wordcount, sources: [{topic: words, partition: 4}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := client("", "shards", "apply", "-f", specFile); err == nil || !strings.Contains(err.Error(), "topic words has 4 partitions (0..3); partition 4 does not exist") {
		t.Fatalf("shards apply of a spec reading words/0004: %q %v, want an error naming the partition", out, err)
	}
	if out, err := client("", "topics", "create", "--name", "more", "--partitions", "1"); err != nil {
		t.Fatalf("topics create: %q %v", out, err)
	}
	if err := os.WriteFile(specFile, []byte("- {id: wordcount-0000, app: wordcount, sources: [{topic: words, partition: 0}], labels: {team: t}}\n- {id: wordcount-0004, app: wordcount, sources: [{topic: more, partition: 0}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := client("", "shards", "apply", "-f", specFile); err != nil || !strings.Contains(out, "1 created, 1 updated, 0 deleted") {
		t.Fatalf("shards apply: %q %v", out, err)
	}
	for i := 0; i < 2; i++ {
		// The second time, as soon as the leader assigned it again.
		waitfor.Until(t, 30*time.Second, "shards unassign to remove wordcount-0001's assignment", func() (bool, string) {
			out, err := client("", "shards", "unassign", "--shard", "wordcount-0001")
			if err != nil {
				t.Fatalf("shards unassign: %q %v", out, err)
			}
			return strings.Contains(out, "1 assignments removed"), out
		})
	}
	waitfor.Until(t, 30*time.Second, "13 shards PRIMARY after apply and unassign", func() (bool, string) {
		out, err := client("", "shards", "list", "-o", "json")
		if err != nil {
			return false, err.Error()
		}
		var rows []shardRow
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			return false, err.Error()
		}
		return allPrimary(rows, embeddedShards+1, 1)
	})
	if out, err := client("", "query", "--app", "wordcount", "--all"); err != nil || out != want {
		t.Fatalf("counts after apply/unassign: %q %v, want %q", out, err, want)
	}

	// A shard that cannot run (its app is unknown to this binary: written to
	// etcd directly, as `shards apply` refuses it) is FAILED; /readyz says
	// so; `shards unassign --failed` releases it; deleting it makes the
	// member ready again.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(context.Background(), "/consumerd/items/bad-0000", `{"id":"bad-0000","app":"nope","sources":[{"topic":"other","partition":0}]}`); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 30*time.Second, "bad-0000 FAILED and /readyz 503 naming it", func() (bool, string) {
		code, body, err := httpGet(base + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		return code == 503 && strings.Contains(string(body), "bad-0000") && strings.Contains(string(body), "FAILED"), fmt.Sprint(code, " ", string(body))
	})
	// (etcd may show FAILED a moment after the member does.)
	waitfor.Until(t, 30*time.Second, "shards unassign --failed to release bad-0000", func() (bool, string) {
		out, err := client("", "shards", "unassign", "--failed")
		if err != nil {
			t.Fatalf("shards unassign --failed: %q %v", out, err)
		}
		return strings.Contains(out, "unassigned bad-0000 slot 0"), out
	})
	delFile := filepath.Join(dir, "delete.yaml")
	if err := os.WriteFile(delFile, []byte("- {id: bad-0000, delete: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := client("", "shards", "apply", "-f", delFile); err != nil || !strings.Contains(out, "1 deleted") {
		t.Fatalf("shards apply (delete): %q %v", out, err)
	}
	waitfor.Until(t, 30*time.Second, "/readyz 200 after deleting bad-0000", func() (bool, string) {
		code, body, err := httpGet(base + "/readyz")
		return err == nil && code == 200, fmt.Sprint(code, " ", string(body), err)
	})

	// The member's own fan-out query merges across shards too.
	code, body, err := httpGet(base + "/v1/query?app=wordcount&key=the")
	if err != nil || code != 200 {
		t.Fatalf("/v1/query key: %d %s %v", code, body, err)
	}
	var qr struct {
		Value *string
		Found *bool
	}
	if err := json.Unmarshal(body, &qr); err != nil || qr.Value == nil || *qr.Value != "2" || qr.Found == nil || !*qr.Found {
		t.Fatalf("/v1/query?key=the: %s (%v)", body, err)
	}

	// /metrics: the default registry (Go, process) plus consumerd's own.
	code, metrics, err := httpGet(base + "/metrics")
	if err != nil || code != 200 {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "consumerd_member_sessions_total 1",
		`consumerd_http_requests_total{code="200",handler="readyz"}`, "consumerd_shard_", "consumerd_allocator_"} {
		if !bytes.Contains(metrics, []byte(name)) {
			t.Errorf("/metrics lacks %s", name)
		}
	}

	// A lone member has nowhere to drain to: SIGTERM exits 0 at once.
	start := time.Now()
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not exit within 30s of SIGTERM")
	}
	if p.err != nil {
		t.Fatalf("serve exited with %v after SIGTERM (%s)", p.err, time.Since(start))
	}
	t.Logf("serve exited 0, %s after SIGTERM", time.Since(start).Round(time.Millisecond))

	// Last, as it may skip: the exposition format passes promtool's lint.
	promtool := findBinary(t, "promtool")
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = bytes.NewReader(metrics)
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// waitHTTP waits until url answers at all.
func waitHTTP(t *testing.T, p *proc, url string) (int, []byte, error) {
	t.Helper()
	var code int
	var body []byte
	waitfor.Until(t, 60*time.Second, url+" to answer", func() (bool, string) {
		if p.exited() {
			t.Fatalf("serve exited: %v\n%s", p.err, p.tail(30))
		}
		var err error
		code, body, err = httpGet(url)
		return err == nil, fmt.Sprint(err)
	})
	return code, body, nil
}

// TestCLIErrors checks that bad input exits non-zero with a one-line error
// naming what was wrong, never a panic or stack trace.
func TestCLIErrors(t *testing.T) {
	bin := consumerdBinary(t)
	dead := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)) // nothing listens here
	spec := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(spec, []byte("- id: wc-1\n  app: wordcount\n  sources: [{topic: words, partition: -2}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		args     []string
		env      []string
		wantCode int
		wantErr  []string
	}{
		{"unknown flag", []string{"serve", "--no-such-flag"}, nil, 2, []string{"unknown flag", "--no-such-flag"}},
		{"unknown command", []string{"frobnicate"}, nil, 2, []string{"unknown command"}},
		{"unknown app", []string{"serve", "--app", "nope"}, nil, 2, []string{"--app", `unknown app "nope"`}},
		{"bad duration", []string{"serve", "--etcd.lease-ttl", "soon"}, nil, 2, []string{"etcd.lease-ttl"}},
		{"bad env", []string{"serve"}, []string{"CONSUMERD_ETCD_LEASE_TTL=soon"}, 2, []string{"CONSUMERD_ETCD_LEASE_TTL"}},
		{"bad log format", []string{"serve", "--log.format", "xml"}, nil, 2, []string{"--log.format", "xml"}},
		{"etcd unreachable", []string{"members", "list", "--etcd.endpoints", dead, "--dial-timeout", "1s"}, nil, 1, []string{"cannot reach etcd", dead}},
		{"etcd unreachable via env", []string{"shards", "list", "--dial-timeout", "1s"}, []string{"CONSUMERD_ETCD_ENDPOINTS=" + dead}, 1, []string{"cannot reach etcd", dead}},
		{"malformed spec", []string{"shards", "apply", "-f", spec, "--etcd.endpoints", dead}, nil, 1, []string{"wc-1", "sources[0].partition"}},
		{"query needs key or all", []string{"query", "--app", "wordcount"}, nil, 2, []string{"--key", "--all"}},
		{"query unknown app", []string{"query", "--app", "nope", "--all"}, nil, 2, []string{`unknown app "nope"`}},
		{"query bad hex key", []string{"query", "--app", "wordcount", "--key-hex", "xyz"}, nil, 2, []string{"--key-hex", `"xyz" is not hex`}},
		{"read --from ID without --partition", []string{"read", "--topic", "t", "--from", "7"}, nil, 2, []string{"--from 7", "give --partition"}},
		{"read with etcd unreachable", []string{"read", "--topic", "nope", "--etcd.endpoints", dead, "--dial-timeout", "1s"}, nil, 1, []string{"cannot reach etcd", dead}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			cmd.Env = append(os.Environ(), tc.env...)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; stderr: %s", code, tc.wantCode, errb.String())
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr %q lacks %q", errb.String(), w)
				}
			}
			if strings.Contains(errb.String(), "goroutine ") || strings.Contains(errb.String(), "panic") {
				t.Errorf("stderr has a stack trace: %s", errb.String())
			}
		})
	}
}

// TestServeShutdownBounds checks the two ways a drain is cut short: a
// member whose shards cannot move (the only other member is frozen) exits 1
// after --shutdown-timeout, and at once on a second signal.
func TestServeShutdownBounds(t *testing.T) {
	bin := consumerdBinary(t)
	dir := t.TempDir()
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", freeport.Port(t))
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", freeport.Port(t))
	natsAddr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	aHTTP := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	startA := func() *proc {
		return startProc(t, "a", filepath.Join(dir, "a.log"), nil, bin, "serve",
			"--data-dir", filepath.Join(dir, "a"), "--http.addr", aHTTP, "--member.id", "a",
			"--embedded.etcd-client-url", etcdURL, "--embedded.etcd-peer-url", peerURL,
			"--embedded.nats-addr", natsAddr, "--shutdown-timeout", "2s", "--log.level", "debug")
	}
	a := startA()
	t.Cleanup(func() { a.kill() })
	waitfor.Until(t, 60*time.Second, "a's /readyz", func() (bool, string) {
		if a.exited() {
			t.Fatalf("a exited: %v\n%s", a.err, a.tail(30))
		}
		code, body, err := httpGet("http://" + aHTTP + "/readyz")
		return err == nil && code == 200, fmt.Sprint(code, string(body), err)
	})
	b := startProc(t, "b", filepath.Join(dir, "b.log"), nil, bin, "serve",
		"--etcd.endpoints", etcdURL, "--wal.url", "nats://"+natsAddr, "--etcd.lease-ttl", "60s",
		"--data-dir", filepath.Join(dir, "b"), "--http.addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--member.id", "b")
	t.Cleanup(func() { b.kill() })
	waitfor.Until(t, 30*time.Second, "b to join", func() (bool, string) {
		out, err := exec.Command(bin, "members", "list", "-o", "json", "--etcd.endpoints", etcdURL).Output()
		return err == nil && strings.Contains(string(out), `"id": "b"`), string(out)
	})
	b.signal(syscall.SIGSTOP) // b can take nothing over now

	logged := func(p *proc, n int) func() (bool, string) {
		return func() (bool, string) {
			got := strings.Count(p.tail(1000), "shutdown requested")
			return got >= n, fmt.Sprintf("%d shutdown requests logged", got)
		}
	}
	// 1. A second signal exits at once (a is the leader and holds every
	// shard; b, frozen, can take none).
	a.signal(syscall.SIGTERM)
	waitfor.Until(t, 10*time.Second, "a to log the shutdown request", logged(a, 1))
	start := time.Now()
	a.signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("a did not exit within 10s of a second SIGTERM")
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 1 || time.Since(start) > 1500*time.Millisecond {
		t.Fatalf("a exited with code %d %s after the second SIGTERM; want 1, at once", code, time.Since(start))
	}

	// 2. The timeout bounds a drain. b (now the leader) wakes up and gives a
	// shard to the restarted a, then freezes again: nobody can move it.
	b.signal(syscall.SIGCONT)
	a = startA()
	// The restarted a itself reports the replica (the assignments of its
	// previous incarnation vanish when it reclaims its member key).
	waitfor.Until(t, 60*time.Second, "a to hold a replica", func() (bool, string) {
		code, body, err := httpGet("http://" + aHTTP + "/v1/status")
		var st struct {
			Replicas []json.RawMessage `json:"replicas"`
		}
		if err != nil || code != 200 || json.Unmarshal(body, &st) != nil {
			return false, fmt.Sprint(code, string(body), err)
		}
		return len(st.Replicas) > 0, string(body)
	})
	b.signal(syscall.SIGSTOP)
	start = time.Now()
	a.signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("a did not exit within 30s of SIGTERM with --shutdown-timeout 2s")
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 1 || time.Since(start) < 2*time.Second {
		t.Fatalf("a exited with code %d after %s; want 1 after the 2s timeout", code, time.Since(start))
	}
	b.signal(syscall.SIGCONT)
}
