package shard_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// TestFailuresAreIsolated: an application error, an application panic, a
// RocksDB open error, a malformed spec and an unknown app each put their
// replica in FAILED with the error text in etcd, while a healthy shard on
// the same member keeps consuming.
func TestFailuresAreIsolated(t *testing.T) {
	failing := shardtest.HookedApp("failing", func(s shard.Shard, env topic.Envelope) error {
		if string(env.Message.Payload) == "FAIL" {
			return errors.New("cannot count FAIL")
		}
		return nil
	})
	panicking := shardtest.HookedApp("panicking", func(s shard.Shard, env topic.Envelope) error {
		if string(env.Message.Payload) == "PANIC" {
			panic("app bug on PANIC")
		}
		return nil
	})
	e := shardtest.NewCluster(t, memory.NewBuilder(), wordcount.App(), failing, panicking)
	good := shardtest.WordcountSpec("good", 0, 0)
	bad := &shard.Spec{ID: "bad", App: "failing", Sources: []shard.Source{{Topic: wordcount.InputTopic, Partition: 1}}}
	pan := &shard.Spec{ID: "pan", App: "panicking", Sources: []shard.Source{{Topic: wordcount.InputTopic, Partition: 2}}}
	dbf := shardtest.WordcountSpec("dbfail", 3, 0)
	unknown := &shard.Spec{ID: "unknown", App: "nope", Sources: []shard.Source{{Topic: wordcount.InputTopic, Partition: 4}}}
	for _, s := range []*shard.Spec{good, bad, pan, dbf, unknown} {
		e.PutSpec(s)
	}
	e.PutRawSpec("malformed", `{"id":"malformed","app":"wordcount","sources":[{"topic":"words","partition":5}],"max_txn_duration":"soon"}`)

	lines := shardtest.Corpus(9, 30)
	e.Publish(0, lines[:10]...)
	e.Publish(1, "ok line", "FAIL", "after")
	e.Publish(2, "ok line", "PANIC")

	dir := t.TempDir()
	// A file where the shard's DB directory should be.
	if err := os.MkdirAll(filepath.Join(dir, "shards"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "shards", "dbfail"), []byte("not a db"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := e.StartNode("n", dir)
	for _, id := range []string{"good", "bad", "pan", "dbfail", "unknown", "malformed"} {
		e.Assign(n, id, 0)
	}
	for id, want := range map[string]string{
		"bad":       "cannot count FAIL",
		"pan":       "Consume panicked: app bug on PANIC",
		"dbfail":    "open rocksdb",
		"unknown":   `unknown app "nope"`,
		"malformed": `shard spec "malformed"`,
	} {
		st := e.WaitState(n, id, 0, allocator.StateFailed)
		if !strings.Contains(st.Error, want) {
			t.Errorf("%s failed with %q, want it to contain %q", id, st.Error, want)
		}
		if len(st.Error) > 4096 {
			t.Errorf("%s: error text of %d bytes", id, len(st.Error))
		}
	}
	// The healthy shard keeps going after its neighbours failed.
	e.Publish(0, lines[10:]...)
	if d := shardtest.DiffCounts(e.Counts(n, good), wordcount.Count(lines)); d != "" {
		t.Fatalf("healthy shard: %s", d)
	}
	var failed int
	for _, ri := range n.Service.Status() {
		if ri.State == allocator.StateFailed {
			failed++
		}
	}
	if failed != 5 {
		t.Fatalf("want 5 failed replicas, status %+v", n.Service.Status())
	}
	if _, _, ok := n.Service.Primary("bad"); ok {
		t.Fatal("a failed shard still serves queries")
	}
}

// TestTransientWALFailureRestarts: the recovery log refuses appends for a
// while (the WAL's retries run out: a NATS outage longer than they wait).
// The primary does not go FAILED: it says it is restarting, restarts by
// itself once the WAL is back, and its counts are exact.
func TestTransientWALFailureRestarts(t *testing.T) {
	mem := memory.NewBuilder()
	spec := shardtest.WordcountSpec("wc-0", 0, 0)
	recovery := recoverylog.Channel(spec.ID)
	var down atomic.Bool
	mem.SetAppendHook(func(ch string, msg *message.MutableMessage, st memory.Stage) error {
		if ch == recovery && st == memory.BeforeStore && down.Load() {
			return errors.New("injected: nats: connection closed")
		}
		return nil
	})
	e := shardtest.NewCluster(t, mem, wordcount.App())
	e.PutSpec(spec)
	lines := shardtest.Corpus(3, 60)
	e.Publish(0, lines[:20]...)
	n := e.StartPrimary("n", t.TempDir(), spec)
	if d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(lines[:20])); d != "" {
		t.Fatal(d)
	}

	down.Store(true)
	e.Publish(0, lines[20:40]...)
	shardtest.Eventually(t, "the replica to report a restart", func() (bool, string) {
		st, _ := e.Status(n, spec.ID, 0)
		return st.State == allocator.StateBackfill && strings.Contains(st.Error, "restarting in") &&
			strings.Contains(st.Error, "injected: nats: connection closed"), fmt.Sprintf("status %+v", st)
	})
	down.Store(false)
	e.Publish(0, lines[40:]...)
	e.WaitState(n, spec.ID, 0, allocator.StatePrimary)
	if d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("after the restart: %s", d)
	}
}

// TestTransientOutputFailureRestarts: the output partition refuses appends
// for longer than the WAL adaptor's retries wait (a NATS outage). The
// drainer does not retry around the adaptor: the primary stops with the
// adaptor's exhaustion and restarts by itself (never FAILED), its
// successor publishes what was left from the outbox, and every count goes
// out exactly once (each published count of a token is higher than the
// one before: a transaction published twice would repeat one). With no
// input after the outage, the successor publishes the backlog by itself.
func TestTransientOutputFailureRestarts(t *testing.T) {
	for _, more := range []bool{true, false} {
		t.Run(fmt.Sprintf("input-after=%v", more), func(t *testing.T) { runOutputOutage(t, more) })
	}
}

func runOutputOutage(t *testing.T, inputAfter bool) {
	mem := memory.NewBuilder()
	spec := shardtest.WordcountSpec("wc-0", 0, 0)
	output := topic.ChannelName(wordcount.OutputTopic, 0)
	var down atomic.Bool
	mem.SetAppendHook(func(ch string, msg *message.MutableMessage, st memory.Stage) error {
		if ch == output && st == memory.BeforeStore && down.Load() {
			return errors.New("injected: nats: connection closed")
		}
		return nil
	})
	e := shardtest.NewCluster(t, mem, wordcount.App())
	e.PutSpec(spec)
	lines := shardtest.Corpus(4, 60)
	e.Publish(0, lines[:20]...)
	n := e.StartPrimary("n", t.TempDir(), spec)
	if d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(lines[:20])); d != "" {
		t.Fatal(d)
	}

	down.Store(true)
	e.Publish(0, lines[20:40]...)
	shardtest.Eventually(t, "the replica to report a restart", func() (bool, string) {
		st, _ := e.Status(n, spec.ID, 0)
		if st.State == allocator.StateFailed {
			t.Fatalf("the replica went FAILED on an output outage: %s", st.Error)
		}
		restarting := st.State == allocator.StateBackfill && strings.Contains(st.Error, "restarting in") &&
			strings.Contains(st.Error, "publishing outputs") && strings.Contains(st.Error, "injected: nats: connection closed")
		return restarting, fmt.Sprintf("status %+v", st)
	})
	down.Store(false)
	want := wordcount.Count(lines[:40])
	if inputAfter {
		e.Publish(0, lines[40:]...)
		want = wordcount.Count(lines)
	}
	shardtest.Eventually(t, "every count published exactly once", func() (bool, string) {
		last := map[string]int64{}
		for _, m := range e.ReadTopic(topic.Description{Name: wordcount.OutputTopic, Partitions: 1})[0] {
			c, err := strconv.ParseInt(string(m.Payload), 10, 64)
			if err != nil {
				t.Fatalf("payload %q: %v", m.Payload, err)
			}
			if c <= last[m.Key] {
				t.Fatalf("count %d of %q published after %d: a transaction's outputs went out twice", c, m.Key, last[m.Key])
			}
			last[m.Key] = c
		}
		d := shardtest.DiffCounts(last, want)
		return d == "", d
	})
}

// TestTransientScannerFailureRestarts: a source's scanner fails mid-read
// with a transient backend error (as a gap check that got no answer did in
// the chaos harness, while a member's link flapped). The primary restarts
// by itself instead of going FAILED, and its counts are exact.
func TestTransientScannerFailureRestarts(t *testing.T) {
	mem := memory.NewBuilder()
	spec := shardtest.WordcountSpec("wc-0", 0, 0)
	source := topic.ChannelName(wordcount.InputTopic, 0)
	var fails atomic.Int32
	mem.SetScanHook(func(ch string, id message.MessageID) error {
		if ch == source && id == 25 && fails.Add(1) == 1 {
			return errors.New("injected: no reply within the request timeout")
		}
		return nil
	})
	e := shardtest.NewCluster(t, mem, wordcount.App())
	e.PutSpec(spec)
	lines := shardtest.Corpus(3, 60)
	e.Publish(0, lines...)
	n := e.StartPrimary("n", t.TempDir(), spec)
	shardtest.Eventually(t, "counts exact after the scanner failed once", func() (bool, string) {
		st, _ := e.Status(n, spec.ID, 0)
		if st.State == allocator.StateFailed {
			t.Fatalf("the replica went FAILED on a transient scanner failure: %s", st.Error)
		}
		d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(lines))
		return d == "" && st.State == allocator.StatePrimary, d
	})
	if fails.Load() == 0 {
		t.Fatal("the scanner never reached the injected failure")
	}
}
