package shard_test

import (
	"testing"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/rocksmem"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// The shard databases of a service open with its memory budget: their
// memtables count in the budget's write buffers while the primaries run,
// and nothing is left in them once Run returned (every database closed, so
// the owner may close the budget).
func TestShardDatabasesShareTheServicesMemory(t *testing.T) {
	mem, err := rocksmem.New(rocksmem.MinBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	e := shardtest.NewCluster(t, memory.NewBuilder(), wordcount.App())
	e.Memory = mem
	specs := []*shard.Spec{shardtest.WordcountSpec("wc-0", 0, 0), shardtest.WordcountSpec("wc-1", 1, 0)}
	lines := shardtest.Corpus(3, 40)
	a := e.StartNode("a", t.TempDir())
	for i, spec := range specs {
		e.PutSpec(spec)
		e.Publish(i, lines...)
		e.Assign(a, spec.ID, 0)
		e.WaitState(a, spec.ID, 0, allocator.StatePrimary)
	}
	for _, spec := range specs {
		if d := shardtest.DiffCounts(e.Counts(a, spec), wordcount.Count(lines)); d != "" {
			t.Fatalf("%s: %s", spec.ID, d)
		}
	}
	if s := mem.Stats(); s.WriteBufferUsage == 0 || s.CacheUsage == 0 {
		t.Fatalf("budget stats %+v with two primaries running: their databases do not use the budget", s)
	}
	a.Kill()
	if s := mem.Stats(); s.WriteBufferUsage != 0 {
		t.Fatalf("budget stats %+v after the service stopped: a database is still open", s)
	}
}
