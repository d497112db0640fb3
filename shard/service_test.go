package shard_test

import (
	"path/filepath"
	"testing"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// TestPrimaryCountsAndRestartsFromLocalDB runs a primary, restarts it on the
// same data dir (reusing the local DB) and checks exact counts throughout.
func TestPrimaryCountsAndRestartsFromLocalDB(t *testing.T) {
	e := newEnv(t, memory.NewBuilder(), wordcount.App())
	spec := wcSpec("wc-0", 0, 0)
	e.putSpec(spec)
	lines := corpus(1, 40)
	e.publish(0, lines[:20]...)

	dir := t.TempDir()
	a := e.startNode("a", dir)
	e.assign(a, spec.ID, 0)
	e.waitState(a, spec.ID, 0, allocator.StatePrimary)
	if d := diffCounts(e.counts(a, spec), wordcount.Count(lines[:20])); d != "" {
		t.Fatalf("first run: %s", d)
	}
	e.publish(0, lines[20:30]...)
	if d := diffCounts(e.counts(a, spec), wordcount.Count(lines[:30])); d != "" {
		t.Fatalf("live: %s", d)
	}
	st := a.svc.Status()
	if len(st) != 1 || st[0].Shard != spec.ID || st[0].State != allocator.StatePrimary || st[0].Applied == 0 {
		t.Fatalf("status %+v", st)
	}
	a.kill()
	if !exists(filepath.Join(dir, "shards", spec.ID, "CURRENT")) {
		t.Fatal("local DB was not kept")
	}

	e.publish(0, lines[30:]...)
	b := e.startNode("b", dir)
	e.assign(b, spec.ID, 0)
	if d := diffCounts(e.counts(b, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("after restart: %s", d)
	}
	eventually(t, "lag reported as zero", func() (bool, string) {
		st := b.svc.Status()
		if len(st) != 1 {
			return false, "no replica"
		}
		lag, ok := st[0].Lag["words/0000"]
		return ok && lag == 0, "lag not zero"
	})
}
