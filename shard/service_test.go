package shard_test

import (
	"path/filepath"
	"testing"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// TestPrimaryCountsAndRestartsFromLocalDB runs a primary, restarts it on the
// same data dir (reusing the local DB) and checks exact counts throughout.
func TestPrimaryCountsAndRestartsFromLocalDB(t *testing.T) {
	e := shardtest.NewCluster(t, memory.NewBuilder(), wordcount.App())
	spec := shardtest.WordcountSpec("wc-0", 0, 0)
	e.PutSpec(spec)
	lines := shardtest.Corpus(1, 40)
	e.Publish(0, lines[:20]...)

	dir := t.TempDir()
	a := e.StartNode("a", dir)
	e.Assign(a, spec.ID, 0)
	e.WaitState(a, spec.ID, 0, allocator.StatePrimary)
	if d := shardtest.DiffCounts(e.Counts(a, spec), wordcount.Count(lines[:20])); d != "" {
		t.Fatalf("first run: %s", d)
	}
	e.Publish(0, lines[20:30]...)
	if d := shardtest.DiffCounts(e.Counts(a, spec), wordcount.Count(lines[:30])); d != "" {
		t.Fatalf("live: %s", d)
	}
	st := a.Service.Status()
	if len(st) != 1 || st[0].Shard != spec.ID || st[0].State != allocator.StatePrimary || st[0].Applied == 0 {
		t.Fatalf("status %+v", st)
	}
	a.Kill()
	if !shardtest.Exists(filepath.Join(dir, "shards", spec.ID, "CURRENT")) {
		t.Fatal("local DB was not kept")
	}

	e.Publish(0, lines[30:]...)
	b := e.StartNode("b", dir)
	e.Assign(b, spec.ID, 0)
	if d := shardtest.DiffCounts(e.Counts(b, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("after restart: %s", d)
	}
	shardtest.Eventually(t, "lag reported as zero", func() (bool, string) {
		st := b.Service.Status()
		if len(st) != 1 {
			return false, "no replica"
		}
		lag, ok := st[0].Lag["words/0000"]
		return ok && lag == 0, "lag not zero"
	})
}
