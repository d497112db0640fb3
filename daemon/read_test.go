package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/topic"
)

// watchBuffer is an io.Writer whose content a test can wait on.
type watchBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{}
}

func newWatchBuffer() *watchBuffer { return &watchBuffer{changed: make(chan struct{})} }

func (w *watchBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.changed)
	w.changed = make(chan struct{})
	return w.b.Write(p)
}

// waitFor waits until cond holds for the content written so far.
func (w *watchBuffer) waitFor(t *testing.T, what string, cond func(string) bool) string {
	t.Helper()
	s, ok := w.await(30*time.Second, cond)
	if !ok {
		t.Fatalf("timed out waiting for %s; output so far: %.2000q", what, s)
	}
	return s
}

// await waits up to timeout until cond holds for the content written so
// far, and returns it: for goroutines other than the test's, which may not
// call t.Fatal.
func (w *watchBuffer) await(timeout time.Duration, cond func(string) bool) (string, bool) {
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		s, ch := w.b.String(), w.changed
		w.mu.Unlock()
		if cond(s) {
			return s, true
		}
		select {
		case <-ch:
		case <-deadline:
			return s, false
		}
	}
}

// readMsg is one message as read prints it, bytes decoded.
type readMsg struct {
	partition  int
	id         uint64
	key, value string
}

func (m readMsg) String() string {
	return fmt.Sprintf("%d/%d %q=%.40q(%d bytes)", m.partition, m.id, m.key, m.value, len(m.value))
}

// decodeRead parses `read -o json` output.
func decodeRead(t *testing.T, out string) []readMsg {
	t.Helper()
	var msgs []readMsg
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		var rm api.ReadMessage
		if err := dec.Decode(&rm); err != nil {
			t.Fatalf("read -o json line %.200q: %v", sc.Text(), err)
		}
		k, err := api.DecodeBytes("key", rm.Key, rm.KeyB64)
		if err != nil {
			t.Fatalf("line %.200q: %v", sc.Text(), err)
		}
		v, err := api.DecodeBytes("payload", rm.Payload, rm.PayloadB64)
		if err != nil {
			t.Fatalf("line %.200q: %v", sc.Text(), err)
		}
		msgs = append(msgs, readMsg{rm.Partition, rm.ID, k, v})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return msgs
}

// bigPayload is the largest payload with a short key that fits the NATS
// server's default max_payload (1 MiB, less room for the key and headers):
// random bytes, so not UTF-8, without '\n' or '\r' (it travels as one line
// of `publish --format kv`).
func bigPayload() string {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 1<<20-1024)
	for i := range b {
		for b[i] == 0 || b[i] == '\n' || b[i] == '\r' {
			b[i] = byte(r.Uint32())
		}
	}
	return string(b)
}

func TestRead(t *testing.T) {
	c := newCLI(t)
	c.ok("", "topics", "create", "--name", "t", "--partitions", "3")
	big := bigPayload()
	// Keys and payloads of every kind: not UTF-8 (two keys differing only
	// in such bytes), NUL, the empty key, a TAB in a payload, ~1 MiB.
	kvs := [][2]string{
		{"plain", "hello world"}, {"k\xff\x00z", "\xfe\xfd binary"}, {"a\xffb", "x"}, {"a\xfeb", "y"},
		{"", "empty key"}, {"tabs", "a\tb\tc"}, {"big\xc3\x28", big},
	}
	var in strings.Builder
	for _, kv := range kvs {
		in.WriteString(kv[0] + "\t" + kv[1] + "\n")
	}
	c.ok(in.String(), "publish", "--topic", "t", "--format", "kv")
	c.ok(in.String(), "publish", "--topic", "t", "--format", "kv") // two messages per key
	// want: partition order, then publish order.
	var want []readMsg
	for p := 0; p < 3; p++ {
		for round := 0; round < 2; round++ {
			for _, kv := range kvs {
				if topic.PartitionFor(kv[0], 3) == p {
					want = append(want, readMsg{partition: p, key: kv[0], value: kv[1]})
				}
			}
		}
	}
	same := func(got, want []readMsg) bool {
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if got[i].partition != want[i].partition || got[i].key != want[i].key || got[i].value != want[i].value ||
				(i > 0 && got[i].partition == got[i-1].partition && got[i].id <= got[i-1].id) {
				return false
			}
		}
		return true
	}

	// -o json: every byte exact, partitions in order, ids increasing; it
	// stops at the head.
	got := decodeRead(t, c.ok("", "read", "--topic", "t", "-o", "json"))
	if !same(got, want) {
		t.Fatalf("read -o json:\n got %v\nwant %v", got, want)
	}
	// -o lines: key<TAB>payload, raw bytes.
	var lines strings.Builder
	for _, m := range want {
		lines.WriteString(m.key + "\t" + m.value + "\n")
	}
	if out := c.ok("", "read", "--topic", "t"); out != lines.String() {
		t.Fatalf("read -o lines: %d bytes, want %d: %.300q", len(out), lines.Len(), out)
	}
	// One partition, from an id on (inclusive).
	p := topic.PartitionFor("plain", 3)
	var inP []readMsg
	for _, m := range got {
		if m.partition == p {
			inP = append(inP, m)
		}
	}
	from := inP[1]
	got2 := decodeRead(t, c.ok("", "read", "--topic", "t", "--partition", fmt.Sprint(p), "--from", fmt.Sprint(from.id), "-o", "json"))
	if !same(got2, inP[1:]) || got2[0].id != from.id {
		t.Fatalf("read --partition %d --from %d:\n got %v\nwant %v", p, from.id, got2, inP[1:])
	}
	if out := c.ok("", "read", "--topic", "t", "--partition", fmt.Sprint(p), "--from", fmt.Sprint(inP[len(inP)-1].id+1000)); out != "" {
		t.Fatalf("read from past the head: %.200q, want nothing", out)
	}
	if out := c.ok("", "read", "--topic", "t", "--from", "end"); out != "" {
		t.Fatalf("read --from end: %.200q, want nothing", out)
	}

	// --follow: what is there, then what is published after it started;
	// cancelling ends it with exit 0.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := newWatchBuffer()
	type result struct {
		stderr string
		code   int
	}
	done := make(chan result, 1)
	go func() {
		errs, code := c.runTo(ctx, out, "", "read", "--topic", "t", "--follow", "-o", "json")
		done <- result{errs, code}
	}()
	out.waitFor(t, "the messages published before read --follow", func(s string) bool { return strings.Count(s, "\n") == len(want) })
	c.ok("late\tnews\n", "publish", "--topic", "t", "--format", "kv")
	s := out.waitFor(t, "the message published after read --follow started", func(s string) bool { return strings.Count(s, "\n") == len(want)+1 })
	if late := decodeRead(t, s)[len(want)]; late.key != "late" || late.value != "news" || late.partition != topic.PartitionFor("late", 3) {
		t.Fatalf("followed message: %v", late)
	}
	cancel()
	select {
	case r := <-done:
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("read --follow after cancel: exit %d, stderr %q; want 0 and nothing", r.code, r.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("read --follow did not end within 10s of its context")
	}

	// Bad input.
	c.fails(1, `--topic: topic "nope" does not exist (topics: t)`, "", "read", "--topic", "nope")
	c.fails(2, "--partition: 3 out of range: topic t has 3 partition(s), 0..2", "", "read", "--topic", "t", "--partition", "3")
	c.fails(2, "--from 5: a message id is a position in one partition; give --partition", "", "read", "--topic", "t", "--from", "5")
}

func TestReadNATSDown(t *testing.T) {
	c := newCLI(t)
	c.ok("", "topics", "create", "--name", "t", "--partitions", "1")
	dead := fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t))
	var out, errb bytes.Buffer
	start := time.Now()
	code := Run(t.Context(), []string{"read", "--topic", "t", "--follow", "--etcd.endpoints", c.etcd, "--wal.url", dead, "--dial-timeout", "1s"},
		Options{Apps: c.apps, Stdout: &out, Stderr: &errb})
	if code != 1 || !strings.Contains(errb.String(), "cannot reach NATS JetStream at "+dead) || time.Since(start) > 3*time.Second {
		t.Fatalf("read with NATS down: exit %d after %v, stderr %q; want exit 1 within --dial-timeout naming the URL", code, time.Since(start), errb.String())
	}
}

// String is the content written so far.
func (w *watchBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
