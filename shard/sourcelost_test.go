package shard_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// The operator's side of a source that lost messages: the NATS API deletes
// and re-creates or purges a stream, the shard goes FAILED saying so (never
// a silent skip), and a source reset in the spec (what `shards
// accept-source` writes) has it read on, once.

// wordsStream is the stream of words/<p> under the default namespace.
func wordsStream(t *testing.T, p int) string {
	t.Helper()
	name, err := jetstream.StreamName(jetstream.DefaultNamespace, fmt.Sprintf("words/%04d", p))
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// bounds reads what channel ch holds now.
func bounds(t *testing.T, e *shardtest.Cluster, ch string) wal.Bounds {
	t.Helper()
	w, err := e.Opener.Open(context.Background(), &wal.OpenOption{Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	b, err := w.Bounds(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// acceptSource writes what `shards accept-source --from start|end` writes:
// a reset of spec's first source to the channel's first (start) or last
// (end) id now, with a term above every term so far.
func acceptSource(t *testing.T, e *shardtest.Cluster, spec *shard.Spec, from string) *shard.Spec {
	t.Helper()
	src := spec.Sources[0]
	b := bounds(t, e, src.Channel())
	after := uint64(b.Last)
	if from == "start" {
		after = uint64(b.First) - 1
	}
	resp, err := e.Client.Get(context.Background(), "/")
	if err != nil {
		t.Fatal(err)
	}
	next := *spec
	next.SourceResets = []shard.SourceReset{{Topic: src.Topic, Partition: src.Partition, Incarnation: b.Incarnation,
		After: after, Term: resp.Header.Revision + 1, From: from}}
	e.PutSpec(&next)
	return &next
}

// reassign gives n a fresh assignment of shardID at slot 0 (as `shards
// unassign --failed` and the leader would).
func reassign(t *testing.T, e *shardtest.Cluster, n *shardtest.Node, shardID string) {
	t.Helper()
	a := allocator.Assignment{Item: shardID, Zone: "z", Member: n.ID, Slot: 0}
	if _, err := e.Client.Delete(context.Background(), allocator.AssignmentKey(e.Prefix, a)); err != nil {
		t.Fatal(err)
	}
	e.Assign(n, shardID, 0)
}

// waitLost waits for n's primary of shardID to be FAILED because its source
// lost messages, the text naming what it must.
func waitLost(t *testing.T, e *shardtest.Cluster, n *shardtest.Node, shardID string, want ...string) {
	t.Helper()
	shardtest.Eventually(t, shardID+" on "+n.ID+" FAILED for a lost source", func() (bool, string) {
		st, _ := e.Status(n, shardID, 0)
		return st.State == allocator.StateFailed, fmt.Sprintf("status %+v (a shard that skips silently stays PRIMARY)", st)
	})
	st, _ := e.Status(n, shardID, 0)
	for _, w := range append([]string{shard.ErrSourceLost.Error(), "words/0000", "accept-source --shard " + shardID}, want...) {
		if !strings.Contains(st.Error, w) {
			t.Errorf("FAILED text does not say %q:\n%s", w, st.Error)
		}
	}
}

// A words stream deleted and created again (nats stream rm; more lines
// published): the primary stops FAILED instead of skipping the new lines
// (their ids are at or below its offset), and so does a standby promoted
// after it, from the offset in the state. Accepted from the start, the
// shard counts the new stream's lines once; the reset, recorded in the
// state, is inert after a failover to a member with no local database.
func TestSourceStreamRecreated(t *testing.T) {
	url := natstest.Start(t)
	e := shardtest.NewCluster(t, jetstream.NewBuilder(jetstream.Config{URL: url}), wordcount.App())
	spec := shardtest.WordcountSpec("wc-0", 0, 1)
	e.PutSpec(spec)
	a, b := e.StartNode("a", t.TempDir()), e.StartNode("b", t.TempDir())
	e.Assign(a, spec.ID, 0)
	e.Assign(b, spec.ID, 1)
	e.WaitState(a, spec.ID, 0, allocator.StatePrimary)
	e.WaitState(b, spec.ID, 1, allocator.StateStandby)
	first := shardtest.Corpus(1, 50)
	e.Publish(0, first...)
	if d := shardtest.DiffCounts(e.Counts(a, spec), wordcount.Count(first)); d != "" {
		t.Fatalf("before: %s", d)
	}
	before := bounds(t, e, "words/0000")

	if err := natstest.Admin(t, url).DeleteStream(context.Background(), wordsStream(t, 0)); err != nil {
		t.Fatal(err)
	}
	more := shardtest.Corpus(2, 20)
	bounds(t, e, "words/0000") // opening the channel creates its stream again, as `consumerd publish` does
	e.Publish(0, more...)
	// Removed, or removed and created again: what a finds first.
	waitLost(t, e, a, spec.ID, "removed", "committed offset 50 in incarnation "+before.Incarnation)

	a.Kill()
	e.Promote(b, spec.ID, 1)
	waitLost(t, e, b, spec.ID, "created again", "ids 1..20")

	spec = acceptSource(t, e, spec, "start")
	reassign(t, e, b, spec.ID)
	e.WaitState(b, spec.ID, 0, allocator.StatePrimary)
	all := append(first[:50:50], more...)
	if d := shardtest.DiffCounts(e.Counts(b, spec), wordcount.Count(all)); d != "" {
		t.Fatalf("after accepting from the start: %s", d)
	}
	sh, release, ok := b.Service.Primary(spec.ID)
	if !ok {
		t.Fatal("b is not primary")
	}
	off, _, err := recoverylog.LoadOffset(sh.Database(), "words/0000")
	release()
	if want := (recoverylog.SourceOffset{ID: 20, Incarnation: spec.SourceResets[0].Incarnation, ResetTerm: uint64(spec.SourceResets[0].Term)}); err != nil || off != want {
		t.Fatalf("committed offset %+v (%v), want %+v", off, err, want)
	}

	b.Kill()
	c := e.StartNode("c", t.TempDir())
	e.Assign(c, spec.ID, 0)
	e.WaitState(c, spec.ID, 0, allocator.StatePrimary)
	last := shardtest.Corpus(3, 5)
	e.Publish(0, last...)
	if d := shardtest.DiffCounts(e.Counts(c, spec), wordcount.Count(append(all, last...))); d != "" {
		t.Fatalf("after a failover: %s", d)
	}
}

// Lines published while the shard is down and purged before it reads them
// (nats stream purge --keep): the next primary stops FAILED naming the ids
// removed; accepted from the end, it counts only what comes after.
func TestSourcePurgedAheadOfOffset(t *testing.T) {
	url := natstest.Start(t)
	e := shardtest.NewCluster(t, jetstream.NewBuilder(jetstream.Config{URL: url}), wordcount.App())
	spec := shardtest.WordcountSpec("wc-0", 0, 0)
	e.PutSpec(spec)
	a := e.StartNode("a", t.TempDir())
	e.Assign(a, spec.ID, 0)
	e.WaitState(a, spec.ID, 0, allocator.StatePrimary)
	first := shardtest.Corpus(4, 30)
	e.Publish(0, first...)
	if d := shardtest.DiffCounts(e.Counts(a, spec), wordcount.Count(first)); d != "" {
		t.Fatalf("before: %s", d)
	}
	a.Kill()
	e.Publish(0, shardtest.Corpus(5, 20)...)
	st, err := natstest.Admin(t, url).Stream(context.Background(), wordsStream(t, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(context.Background(), njs.WithPurgeKeep(5)); err != nil {
		t.Fatal(err)
	}
	b := e.StartNode("b", t.TempDir())
	e.Assign(b, spec.ID, 0)
	waitLost(t, e, b, spec.ID, "ids 31..45 were removed before they were read", "committed offset 30")

	spec = acceptSource(t, e, spec, "end")
	reassign(t, e, b, spec.ID)
	e.WaitState(b, spec.ID, 0, allocator.StatePrimary)
	later := shardtest.Corpus(6, 10)
	e.Publish(0, later...)
	if d := shardtest.DiffCounts(e.Counts(b, spec), wordcount.Count(append(first, later...))); d != "" {
		t.Fatalf("after accepting from the end: %s", d)
	}
}
