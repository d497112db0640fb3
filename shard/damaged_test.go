package shard_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// TestDamagedLocalDBIsRebuilt: the local database is a cache of the
// recovery log. Damaged the ways disks and people damage it, it is moved
// aside under <data-dir>/damaged/ (not deleted: kept for inspection) and
// rebuilt from the log; the shard is PRIMARY again with exact counts, never
// FAILED. Damaged copies are bounded per shard.
func TestDamagedLocalDBIsRebuilt(t *testing.T) {
	glob := func(t *testing.T, dir, pattern string) []string {
		t.Helper()
		m, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil || len(m) == 0 {
			t.Fatalf("no %s in %s (%v)", pattern, dir, err)
		}
		return m
	}
	damages := map[string]func(t *testing.T, db string){
		"truncated SST": func(t *testing.T, db string) {
			if err := os.Truncate(glob(t, db, "*.sst")[0], 100); err != nil {
				t.Fatal(err)
			}
		},
		"deleted SST": func(t *testing.T, db string) {
			if err := os.Remove(glob(t, db, "*.sst")[0]); err != nil {
				t.Fatal(err)
			}
		},
		"deleted CURRENT": func(t *testing.T, db string) {
			if err := os.Remove(filepath.Join(db, "CURRENT")); err != nil {
				t.Fatal(err)
			}
		},
		"garbled MANIFEST": func(t *testing.T, db string) {
			if err := os.WriteFile(glob(t, db, "MANIFEST-*")[0], []byte("garbage"), 0o644); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			e := shardtest.NewCluster(t, memory.NewBuilder(), wordcount.App())
			spec := shardtest.WordcountSpec("wc-0", 0, 0)
			e.PutSpec(spec)
			lines := shardtest.Corpus(5, 80)
			e.Publish(0, lines[:50]...)
			dir := t.TempDir()
			db := filepath.Join(dir, "shards", spec.ID)
			for round := range keptDamagedPlusOne {
				n := e.StartPrimary("n", dir, spec)
				if d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(lines[:50+round])); d != "" {
					t.Fatalf("round %d: %s", round, d)
				}
				n.Kill()
				damage(t, db)
				e.Publish(0, lines[50+round])
			}
			n := e.StartPrimary("n", dir, spec)
			e.Publish(0, lines[50+keptDamagedPlusOne:]...)
			if d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(lines)); d != "" {
				t.Fatalf("after rebuilding: %s", d)
			}
			if kept := glob(t, filepath.Join(dir, "damaged"), spec.ID+".*"); len(kept) != keptDamagedPlusOne-1 {
				t.Fatalf("damaged copies kept: %v; want the newest %d", kept, keptDamagedPlusOne-1)
			}
		})
	}
}

// keptDamagedPlusOne is one more damage than the copies kept (2).
const keptDamagedPlusOne = 3

// TestLostRecoveryLogFailsLoudlyThenResets: the recovery log loses every
// record (its channel removed and recreated, as when the NATS store is
// deleted) while the local database survives. The shard does not wait
// forever: it goes FAILED naming both positions and the choices. Once the
// loss is accepted (the spec's log_reset_term, as 'shards reset' writes
// it), the database is set aside and the shard rebuilt from what the log
// has: no offsets, so it re-reads its source, and the counts are exact.
func TestLostRecoveryLogFailsLoudlyThenResets(t *testing.T) {
	e := shardtest.NewCluster(t, memory.NewBuilder(), wordcount.App())
	spec := shardtest.WordcountSpec("wc-0", 0, 0)
	e.PutSpec(spec)
	lines := shardtest.Corpus(6, 60)
	e.Publish(0, lines[:40]...)
	dir := t.TempDir()
	n := e.StartPrimary("n", dir, spec)
	if d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(lines[:40])); d != "" {
		t.Fatal(d)
	}
	n.Kill()
	if err := e.Opener.(wal.ChannelRemover).RemoveChannel(t.Context(), recoverylog.Channel(spec.ID)); err != nil {
		t.Fatal(err)
	}

	n = e.StartNode("n", dir)
	e.Assign(n, spec.ID, 0)
	st := e.WaitState(n, spec.ID, 0, allocator.StateFailed)
	for _, want := range []string{"recovery log is behind the local database", "ends at id 0", "shards reset --shard wc-0", "shards unassign --failed --shard wc-0"} {
		if !strings.Contains(st.Error, want) {
			t.Fatalf("FAILED error %q does not say %q", st.Error, want)
		}
	}

	resp, err := e.Client.Get(t.Context(), "/reset-revision")
	if err != nil {
		t.Fatal(err)
	}
	spec.LogResetTerm = resp.Header.Revision
	e.PutSpec(spec)
	a := allocator.Assignment{Item: spec.ID, Zone: "z", Member: n.ID, Slot: 0}
	if _, err := e.Client.Delete(t.Context(), allocator.AssignmentKey(e.Prefix, a)); err != nil {
		t.Fatal(err)
	}
	e.Assign(n, spec.ID, 0)
	e.WaitState(n, spec.ID, 0, allocator.StatePrimary)
	e.Publish(0, lines[40:]...)
	if d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("after the reset: %s", d)
	}
	if kept, _ := filepath.Glob(filepath.Join(dir, "damaged", spec.ID+".*")); len(kept) != 1 {
		t.Fatalf("set-aside copies: %v; want the database from before the loss", kept)
	}
}

// TestTermsStayAboveTheLogAfterEtcdRebuild: the recovery log has seen terms
// far above etcd's revisions (here: the term base was 1000 and is gone, as
// when etcd is rebuilt from empty). A new primary's term would be below the
// log's, and every handoff fenced; instead the primary raises the term
// base, takes over and counts exactly.
func TestTermsStayAboveTheLogAfterEtcdRebuild(t *testing.T) {
	e := shardtest.NewCluster(t, memory.NewBuilder(), wordcount.App())
	terms := allocator.Terms{Client: e.Client, Prefix: e.Prefix}
	if _, err := terms.Raise(t.Context(), 1000); err != nil {
		t.Fatal(err)
	}
	spec := shardtest.WordcountSpec("wc-0", 0, 0)
	e.PutSpec(spec)
	lines := shardtest.Corpus(8, 60)
	e.Publish(0, lines[:30]...)
	n := e.StartPrimary("n", t.TempDir(), spec)
	if d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(lines[:30])); d != "" {
		t.Fatal(d)
	}

	if _, err := e.Client.Delete(t.Context(), allocator.TermBaseKey(e.Prefix)); err != nil {
		t.Fatal(err)
	}
	a := allocator.Assignment{Item: spec.ID, Zone: "z", Member: n.ID, Slot: 0}
	if _, err := e.Client.Delete(t.Context(), allocator.AssignmentKey(e.Prefix, a)); err != nil {
		t.Fatal(err)
	}
	e.Assign(n, spec.ID, 0) // a new primary term, from revisions far below 1000
	e.WaitState(n, spec.ID, 0, allocator.StatePrimary)
	e.Publish(0, lines[30:]...)
	if d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("after the new handoff: %s", d)
	}
	if base, err := terms.Base(t.Context()); err != nil || base == 0 {
		t.Fatalf("term base %d (%v); want it raised past the log's terms", base, err)
	}
}
