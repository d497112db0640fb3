package shard_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// snapshotCluster is a cluster whose nodes snapshot to a directory store
// every 1 KiB of recovery log, keeping 2.
func snapshotCluster(t *testing.T) (*shardtest.Cluster, *snapshot.DirStore, *shard.Spec) {
	e := shardtest.NewCluster(t, memory.NewBuilder(), wordcount.App())
	st, err := snapshot.NewDirStore(filepath.Join(t.TempDir(), "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	e.Snapshots = &shard.SnapshotOptions{Store: st, Etcd: e.Client, CheckInterval: 10 * time.Millisecond}
	spec := shardtest.WordcountSpec("wc-0", 0, 0)
	spec.SnapshotIntervalBytes = 1024
	spec.SnapshotsKept = 2
	e.PutSpec(spec)
	return e, st, spec
}

// logTruncated reports whether the shard's recovery log no longer starts at
// its first record.
func logTruncated(t *testing.T, e *shardtest.Cluster, shardID string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := e.Opener.Open(ctx, &wal.OpenOption{Channel: recoverylog.Channel(shardID)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sc, err := w.Read(ctx, wal.ReadOption{Name: "test", DeliverPolicy: wal.DeliverStartAfter(0)})
	if err != nil {
		return errors.Is(err, wal.ErrTruncated)
	}
	defer sc.Close()
	select {
	case _, ok := <-sc.Chan():
		if ok {
			return false
		}
		<-sc.Done()
		return errors.Is(sc.Error(), wal.ErrTruncated)
	case <-ctx.Done():
		t.Fatal("recovery log read timed out")
		return false
	}
}

// runUntilTruncated publishes batches to the primary on n until the
// shard's log was truncated behind a snapshot, and returns every line
// published (prior ones included).
func runUntilTruncated(t *testing.T, e *shardtest.Cluster, n *shardtest.Node, spec *shard.Spec, prior ...string) []string {
	lines := append([]string(nil), prior...)
	for round := 0; ; round++ {
		batch := shardtest.Corpus(100+round, 30)
		e.Publish(0, batch...)
		lines = append(lines, batch...)
		if d := shardtest.DiffCounts(e.Counts(n, spec), wordcount.Count(lines)); d != "" {
			t.Fatalf("primary counts: %s", d)
		}
		_, ok, err := snapshot.LoadPointer(context.Background(), e.Client, e.Prefix, spec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ok && logTruncated(t, e, spec.ID) {
			return lines
		}
		if round > 200 {
			t.Fatal("no snapshot truncated the recovery log")
		}
	}
}

// TestSnapshotRestoreOnFreshMember: the primary snapshots and truncates
// its log; a member with a fresh data dir restores the snapshot, replays
// the log after it, and carries on with exact counts.
func TestSnapshotRestoreOnFreshMember(t *testing.T) {
	e, _, spec := snapshotCluster(t)
	a := e.StartNode("a", t.TempDir())
	e.Assign(a, spec.ID, 0)
	e.WaitState(a, spec.ID, 0, allocator.StatePrimary)
	lines := runUntilTruncated(t, e, a, spec)
	tail := shardtest.Corpus(7, 10)
	e.Publish(0, tail...)
	lines = append(lines, tail...)
	if d := shardtest.DiffCounts(e.Counts(a, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("primary counts: %s", d)
	}
	a.Kill()

	b := e.StartNode("b", t.TempDir())
	e.Assign(b, spec.ID, 0)
	e.WaitState(b, spec.ID, 0, allocator.StatePrimary)
	more := shardtest.Corpus(8, 20)
	e.Publish(0, more...)
	lines = append(lines, more...)
	if d := shardtest.DiffCounts(e.Counts(b, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("counts after restore on a fresh member: %s", d)
	}
}

// TestSnapshotRestoresStaleLocalDB: a member whose local database is
// behind the truncated log restores the snapshot instead of failing, and a
// member whose database is ahead of the snapshot reuses it.
func TestSnapshotRestoresStaleLocalDB(t *testing.T) {
	e, _, spec := snapshotCluster(t)
	dirB := t.TempDir()
	a := e.StartNode("a", t.TempDir())
	b := e.StartNode("b", dirB)
	e.Assign(a, spec.ID, 0)
	e.WaitState(a, spec.ID, 0, allocator.StatePrimary)
	first := shardtest.Corpus(9, 10)
	e.Publish(0, first...)
	e.Assign(b, spec.ID, 1)
	e.WaitState(b, spec.ID, 1, allocator.StateStandby)
	b.Kill() // b's database stays at an early position
	lines := runUntilTruncated(t, e, a, spec, first...)
	a.Kill()

	b2 := e.StartNode("b", dirB)
	e.Assign(b2, spec.ID, 0)
	e.WaitState(b2, spec.ID, 0, allocator.StatePrimary)
	if d := shardtest.DiffCounts(e.Counts(b2, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("counts after restoring over a stale local DB: %s", d)
	}
	more := shardtest.Corpus(10, 15)
	e.Publish(0, more...)
	lines = append(lines, more...)
	if d := shardtest.DiffCounts(e.Counts(b2, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("counts: %s", d)
	}
	b2.Kill()
	// Restart on the same dir: the local DB is ahead of the newest snapshot.
	b3 := e.StartNode("b", dirB)
	e.Assign(b3, spec.ID, 0)
	e.WaitState(b3, spec.ID, 0, allocator.StatePrimary)
	if d := shardtest.DiffCounts(e.Counts(b3, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("counts after reusing the local DB: %s", d)
	}
}

// TestSnapshotNoneUsableFails: with the log truncated and every snapshot
// gone, a fresh member goes FAILED with a clear error instead of serving
// wrong state.
func TestSnapshotNoneUsableFails(t *testing.T) {
	e, st, spec := snapshotCluster(t)
	a := e.StartNode("a", t.TempDir())
	e.Assign(a, spec.ID, 0)
	e.WaitState(a, spec.ID, 0, allocator.StatePrimary)
	runUntilTruncated(t, e, a, spec)
	a.Kill()
	objs, err := st.List(context.Background(), spec.ID+"/")
	if err != nil || len(objs) == 0 {
		t.Fatalf("store objects: %v, %v", objs, err)
	}
	for _, o := range objs {
		if err := st.Delete(context.Background(), o.Name); err != nil {
			t.Fatal(err)
		}
	}
	c := e.StartNode("c", t.TempDir())
	e.Assign(c, spec.ID, 0)
	status := e.WaitState(c, spec.ID, 0, allocator.StateFailed)
	if !strings.Contains(status.Error, "no usable snapshot") || !strings.Contains(status.Error, "truncated") {
		t.Fatalf("FAILED with %q, want it to say the log is truncated and no snapshot is usable", status.Error)
	}
}

// TestSnapshotFailureDoesNotFailShard: snapshots that keep failing (here
// at the upload) are logged and retried; the primary keeps consuming.
func TestSnapshotFailureDoesNotFailShard(t *testing.T) {
	e, st, spec := snapshotCluster(t)
	attempts := make(chan struct{}, 100)
	e.Snapshots.Hook = func(shardID string, step snapshot.Step) error {
		if step == snapshot.StepUpload {
			select {
			case attempts <- struct{}{}:
			default:
			}
			return fmt.Errorf("injected upload failure of %s", shardID)
		}
		return nil
	}
	a := e.StartNode("a", t.TempDir())
	e.Assign(a, spec.ID, 0)
	e.WaitState(a, spec.ID, 0, allocator.StatePrimary)
	var lines []string
	for round := 0; len(attempts) < 2; round++ {
		if round > 100 {
			t.Fatal("no snapshot was attempted")
		}
		batch := shardtest.Corpus(200+round, 30)
		e.Publish(0, batch...)
		lines = append(lines, batch...)
		if d := shardtest.DiffCounts(e.Counts(a, spec), wordcount.Count(lines)); d != "" {
			t.Fatalf("counts: %s", d)
		}
	}
	if st, ok := e.Status(a, spec.ID, 0); !ok || st.State != allocator.StatePrimary {
		t.Fatalf("status %+v after failed snapshots, want PRIMARY", st)
	}
	if _, ok, _ := snapshot.LoadPointer(context.Background(), e.Client, e.Prefix, spec.ID); ok {
		t.Fatal("a pointer was published although every snapshot failed")
	}
	if logTruncated(t, e, spec.ID) {
		t.Fatal("the log was truncated although no snapshot succeeded")
	}
	_ = st
}

// TestSnapshotWithHotStandby: a hot standby tails the log while the
// primary snapshots and truncates it; promoted, it carries on exactly.
func TestSnapshotWithHotStandby(t *testing.T) {
	e, _, spec := snapshotCluster(t)
	spec.HotStandbys = 1
	e.PutSpec(spec)
	a := e.StartNode("a", t.TempDir())
	b := e.StartNode("b", t.TempDir())
	e.Assign(a, spec.ID, 0)
	e.Assign(b, spec.ID, 1)
	e.WaitState(a, spec.ID, 0, allocator.StatePrimary)
	e.WaitState(b, spec.ID, 1, allocator.StateStandby)
	lines := runUntilTruncated(t, e, a, spec)
	extra := shardtest.Corpus(11, 30)
	e.Publish(0, extra...)
	lines = runUntilTruncated(t, e, a, spec, append(lines, extra...)...)
	if st, ok := e.Status(b, spec.ID, 1); !ok || st.State != allocator.StateStandby {
		t.Fatalf("standby status %+v after truncations, want STANDBY", st)
	}
	a.Kill()
	e.Promote(b, spec.ID, 1)
	e.WaitState(b, spec.ID, 0, allocator.StatePrimary)
	more := shardtest.Corpus(12, 20)
	e.Publish(0, more...)
	lines = append(lines, more...)
	if d := shardtest.DiffCounts(e.Counts(b, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("counts after promoting the standby: %s", d)
	}
}

// TestSnapshotLaggingStandbyRebootstraps: a standby that falls behind the
// truncated log (its reads paused while the primary snapshots and
// truncates) restores a snapshot and becomes a consistent standby again,
// instead of failing.
func TestSnapshotLaggingStandbyRebootstraps(t *testing.T) {
	e, _, spec := snapshotCluster(t)
	spec.HotStandbys = 1
	e.PutSpec(spec)
	a := e.StartNode("a", t.TempDir())
	e.Assign(a, spec.ID, 0)
	e.WaitState(a, spec.ID, 0, allocator.StatePrimary)
	g := &gate{}
	backend := e.Backend
	e.Backend = &pausableBackend{OpenerBuilderImpls: backend, gate: g}
	b := e.StartNode("b", t.TempDir())
	e.Backend = backend
	e.Assign(b, spec.ID, 1)
	e.WaitState(b, spec.ID, 1, allocator.StateStandby)
	lines := runUntilTruncated(t, e, a, spec)

	g.pause()
	behind := appliedOf(t, b)
	for round := 0; firstRetained(t, e, spec.ID) <= behind+1; round++ {
		if round > 200 {
			t.Fatal("the log was never truncated past the paused standby")
		}
		batch := shardtest.Corpus(300+round, 30)
		e.Publish(0, batch...)
		lines = append(lines, batch...)
		e.Counts(a, spec)
	}
	g.resume()
	shardtest.Eventually(t, "standby rebuilt and caught up", func() (bool, string) {
		st, ok := e.Status(b, spec.ID, 1)
		pa, pb := appliedOf(t, a), appliedOf(t, b)
		return ok && st.State == allocator.StateStandby && pa == pb && pb > behind,
			fmt.Sprintf("standby %+v at %d, primary at %d", st, pb, pa)
	})
	a.Kill()
	e.Promote(b, spec.ID, 1)
	e.WaitState(b, spec.ID, 0, allocator.StatePrimary)
	if d := shardtest.DiffCounts(e.Counts(b, spec), wordcount.Count(lines)); d != "" {
		t.Fatalf("counts after promoting the rebuilt standby: %s", d)
	}
}

func appliedOf(t *testing.T, n *shardtest.Node) uint64 {
	for _, ri := range n.Service.Status() {
		return uint64(ri.Applied)
	}
	return 0
}

// firstRetained is the id of the first message the shard's log retains.
func firstRetained(t *testing.T, e *shardtest.Cluster, shardID string) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := e.Opener.Open(ctx, &wal.OpenOption{Channel: recoverylog.Channel(shardID)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sc, err := w.Read(ctx, wal.ReadOption{Name: "test", DeliverPolicy: wal.DeliverAll()})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	select {
	case m := <-sc.Chan():
		return uint64(m.ID)
	case <-ctx.Done():
		t.Fatal("empty recovery log")
		return 0
	}
}

// gate pauses message delivery of pausableBackend scanners.
type gate struct {
	mu     sync.Mutex
	closed chan struct{} // non-nil while paused; closed on resume
}

func (g *gate) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed == nil {
		g.closed = make(chan struct{})
	}
}

func (g *gate) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed != nil {
		close(g.closed)
		g.closed = nil
	}
}

// wait blocks while paused; false if stop closed first.
func (g *gate) wait(stop <-chan struct{}) bool {
	g.mu.Lock()
	ch := g.closed
	g.mu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-stop:
		return false
	}
}

// pausableBackend wraps a backend so that the scanners it opens deliver
// nothing while its gate is paused (a reader that falls behind).
type pausableBackend struct {
	walimpls.OpenerBuilderImpls
	gate *gate
}

func (p *pausableBackend) Build() (walimpls.OpenerImpls, error) {
	o, err := p.OpenerBuilderImpls.Build()
	if err != nil {
		return nil, err
	}
	return &pausableOpener{OpenerImpls: o, gate: p.gate}, nil
}

type pausableOpener struct {
	walimpls.OpenerImpls
	gate *gate
}

func (p *pausableOpener) Open(ctx context.Context, opt *walimpls.OpenOption) (walimpls.WALImpls, error) {
	w, err := p.OpenerImpls.Open(ctx, opt)
	if err != nil {
		return nil, err
	}
	// Keep the backend's optional interfaces: the adaptor must take its
	// production path (pipelined appends) and the outbox its batches.
	return &pausableWAL{WALImpls: w, AsyncAppender: w.(walimpls.AsyncAppender), BatchAppender: w.(walimpls.BatchAppender), gate: p.gate}, nil
}

type pausableWAL struct {
	walimpls.WALImpls
	walimpls.AsyncAppender
	walimpls.BatchAppender
	gate *gate
}

func (p *pausableWAL) Read(ctx context.Context, opt walimpls.ReadOption) (walimpls.ScannerImpls, error) {
	// No read-ahead: a paused reader must really stay behind.
	opt.ReadAheadBufferSize = 1
	s, err := p.WALImpls.Read(ctx, opt)
	if err != nil {
		return nil, err
	}
	ps := &pausableScanner{ScannerImpls: s, out: make(chan message.ImmutableMessage), stop: make(chan struct{}), done: make(chan struct{})}
	go ps.forward(p.gate)
	return ps, nil
}

type pausableScanner struct {
	walimpls.ScannerImpls
	out      chan message.ImmutableMessage
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	err      error // why forward returned; set before done is closed
}

// forward is the scanner's goroutine: it copies the inner scanner's
// messages while the gate is open, until the inner scanner ends or Close.
func (p *pausableScanner) forward(g *gate) {
	defer close(p.done)
	defer close(p.out)
	p.err = walimpls.ErrScannerClosed
	for m := range p.ScannerImpls.Chan() {
		if !g.wait(p.stop) {
			return
		}
		select {
		case p.out <- m:
		case <-p.stop:
			return
		}
	}
	<-p.ScannerImpls.Done()
	p.err = p.ScannerImpls.Error()
}

func (p *pausableScanner) Chan() <-chan message.ImmutableMessage { return p.out }
func (p *pausableScanner) Done() <-chan struct{}                 { return p.done }

func (p *pausableScanner) Error() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

func (p *pausableScanner) Close() error {
	p.stopOnce.Do(func() { close(p.stop) })
	_ = p.ScannerImpls.Close()
	<-p.done
	return nil
}
