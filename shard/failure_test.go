package shard_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
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
