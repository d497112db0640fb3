package recoverylog

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// ErrRecorderClosed is returned by commits made after Recorder.Close.
var ErrRecorderClosed = errors.New("recoverylog: recorder closed")

// Commit is the outcome of one Recorder.Commit: Done is closed once the
// transaction was acknowledged by the log and applied to the DB, or failed.
type Commit struct {
	done chan struct{}
	err  error

	// Set by Commit, read by the drainer.
	kind Kind
	data []byte
	pos  Position
	size int

	// Guarded by Recorder.mu.
	pending   int // appends not yet acknowledged
	appendErr error
}

// Done is closed when the commit resolved.
func (c *Commit) Done() <-chan struct{} { return c.done }

// Err is the commit's error (nil on success); valid after Done is closed.
func (c *Commit) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Wait waits for the commit to resolve (or ctx) and returns its error.
func (c *Commit) Wait(ctx context.Context) error {
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Position is the chain position after this commit (LogID set once applied).
func (c *Commit) Position() Position {
	<-c.done
	return c.pos
}

func (c *Commit) resolve(err error) {
	c.err = err
	c.data = nil
	close(c.done)
}

// Recorder is the log's single writer after a successful Handoff. It
// appends records continuing its own chain and applies them to the DB
// strictly in order, each once the log acknowledged it.
//
// Commits are pipelined: Commit returns at once; the appends of successive
// commits are in flight together, in call order. A commit is applied (its
// batch plus the new Position, in one DB write) only after its append was
// acknowledged and every earlier commit was applied. After any error — an
// append failing (wal.ErrFenced once a newer writer took over, a cancelled
// context) or a DB write failing — the Recorder is broken: that commit, every
// commit still in flight and every later one fail with the first error.
// Records acknowledged but not applied when it broke are still in the log;
// the next replay applies them (they are committed).
//
// A Recorder runs one applier goroutine until Close, which must be called.
type Recorder struct {
	log    wal.WAL
	db     *grocksdb.DB
	wo     *grocksdb.WriteOptions
	ownWO  bool
	term   uint64
	logger hclog.Logger
	shard  string

	appendMu sync.Mutex // orders chain extension and AppendAsync calls
	next     Position   // chain position after the last record handed to the log (appendMu)

	wake    chan struct{} // cap 1: a commit became applicable, or Close
	stopped chan struct{} // closed when the applier goroutine returned

	mu      sync.Mutex
	queue   []*Commit // unapplied commits, in chain order
	applied Position
	bytes   int64 // bytes of records applied so far
	err     error
	closed  bool
}

func newRecorder(log wal.WAL, db *grocksdb.DB, wo *grocksdb.WriteOptions, ownWO bool, pos Position, term uint64, logger hclog.Logger, shard string) *Recorder {
	r := &Recorder{
		log: log, db: db, wo: wo, ownWO: ownWO, term: term, logger: logger, shard: shard,
		next: pos, applied: pos, wake: make(chan struct{}, 1), stopped: make(chan struct{}),
	}
	go r.run()
	return r
}

// Term is the fencing term the Recorder writes under.
func (r *Recorder) Term() uint64 { return r.term }

// Position is the chain position applied to the DB so far.
func (r *Recorder) Position() Position {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied
}

// AppliedBytes is the total size of the records this Recorder appended and
// applied so far (e.g. to snapshot every N bytes of log).
func (r *Recorder) AppliedBytes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bytes
}

// Err is the error that broke the Recorder, or nil.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Commit appends batch (batch.Data(), which already holds the source
// offsets) as a Txn record — as several chunk records when it exceeds
// DefaultChunkSize — and applies it once acknowledged and once every earlier
// commit was applied. batch is not retained: the caller may reuse or destroy
// it when Commit returns. ctx bounds the append.
func (r *Recorder) Commit(ctx context.Context, batch *grocksdb.WriteBatch) *Commit {
	data := append([]byte(nil), batch.Data()...)
	return r.commit(ctx, KindTxn, data, nil)
}

// CommitSnapshot appends a Snapshot record pointing at manifest and
// covering the log up to id, in order with the Txns, and resolves like a
// Txn commit (it changes only the stored Position).
func (r *Recorder) CommitSnapshot(ctx context.Context, manifest string, covers message.MessageID) *Commit {
	return r.commit(ctx, KindSnapshot, nil, &Record{Kind: KindSnapshot, Manifest: manifest, Covers: uint64(covers)})
}

func (r *Recorder) commit(ctx context.Context, kind Kind, data []byte, rec *Record) *Commit {
	c := &Commit{done: make(chan struct{}), kind: kind, data: data}
	r.appendMu.Lock()
	defer r.appendMu.Unlock()

	r.mu.Lock()
	if r.err != nil || r.closed {
		err := r.err
		if err == nil {
			err = ErrRecorderClosed
		}
		r.mu.Unlock()
		c.resolve(err)
		return c
	}
	var recs [][]byte
	var next Position
	if kind == KindTxn {
		recs, next = EncodeTxn(r.next, r.term, data, DefaultChunkSize)
	} else {
		rec.Term = r.term
		var enc []byte
		enc, next = encodeNext(r.next, *rec)
		recs = [][]byte{enc}
	}
	next.Term = r.next.Term
	r.next = next
	c.pos = next
	c.pending = len(recs)
	for _, b := range recs {
		c.size += len(b)
	}
	r.queue = append(r.queue, c)
	r.mu.Unlock()

	for i, b := range recs {
		props := map[string]string{"recoverylog": kind.String()}
		r.log.AppendAsync(ctx, message.MutableMessage{Payload: b, Properties: props}, func(res *wal.AppendResult, err error) {
			r.acked(c, i, res, err)
		})
	}
	return c
}

// acked records one append outcome of c and wakes the applier. It runs on
// the WAL's callback goroutine, so it never blocks on the DB.
func (r *Recorder) acked(c *Commit, part int, res *wal.AppendResult, err error) {
	r.mu.Lock()
	c.pending--
	if err != nil {
		if c.appendErr == nil {
			c.appendErr = fmt.Errorf("recoverylog: shard %s: append %s record seq %d (part %d): %w", r.shard, c.kind, c.pos.Seq, part, err)
		}
	} else if res != nil && res.MessageID > c.pos.LogID {
		c.pos.LogID = res.MessageID
	}
	ready := c.pending == 0
	r.mu.Unlock()
	if ready {
		notify(r.wake)
	}
}

// run is the applier goroutine: it applies acknowledged commits in order
// until the Recorder is closed and nothing is left in flight.
func (r *Recorder) run() {
	defer close(r.stopped)
	for {
		r.drain()
		r.mu.Lock()
		exit := r.closed && len(r.queue) == 0
		r.mu.Unlock()
		if exit {
			return
		}
		<-r.wake
	}
}

// drain applies the acknowledged commits at the head of the queue, in order.
func (r *Recorder) drain() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.queue) > 0 && r.queue[0].pending == 0 {
		c := r.queue[0]
		r.queue[0] = nil
		r.queue = r.queue[1:]
		if r.err == nil && c.appendErr != nil {
			r.err = c.appendErr
			r.logger.Error("recorder broken", "error", r.err)
		}
		if r.err != nil {
			c.resolve(r.err)
			continue
		}
		r.mu.Unlock()
		err := applyToDB(r.db, r.wo, c.kind, c.data, c.pos)
		r.mu.Lock()
		if err != nil {
			r.err = fmt.Errorf("recoverylog: shard %s: apply %s record seq %d: %w", r.shard, c.kind, c.pos.Seq, err)
			r.logger.Error("recorder broken", "error", r.err)
			c.resolve(r.err)
			continue
		}
		r.applied = c.pos
		r.bytes += int64(c.size)
		appendedBytesTotal.WithLabelValues(r.shard).Add(float64(c.size))
		c.resolve(nil)
	}
}

// Close stops accepting commits (later ones fail with ErrRecorderClosed),
// waits until every commit in flight resolved, stops the applier goroutine, and returns the error that
// broke the Recorder, if any. It does not close the WAL (the caller's).
func (r *Recorder) Close() error {
	r.appendMu.Lock()
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.appendMu.Unlock()

	notify(r.wake)
	<-r.stopped
	r.mu.Lock()
	err := r.err
	wo := r.wo
	own := r.ownWO
	r.ownWO = false
	r.mu.Unlock()
	if own && wo != nil {
		wo.Destroy()
	}
	return err
}
