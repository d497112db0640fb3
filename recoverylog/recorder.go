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

// Commit is one Recorder.Commit: Done is closed once the log acknowledged
// (or failed) every record of it; Recorder.Apply (or Wait) then applies it.
type Commit struct {
	r    *Recorder
	done chan struct{} // closed by the WAL callback of its last record

	// Set by Commit.
	kind Kind
	data []byte
	size int
	// Written by the WAL callbacks before done closes, read after.
	pos       Position // chain position after this commit (LogID set once acknowledged)
	pending   int      // records not yet acknowledged
	appendErr error

	// Guarded by Recorder.mu.
	applied bool
	err     error
}

// Done is closed when the log acknowledged or failed the commit; Apply
// (or Wait) then applies it and reports its outcome.
func (c *Commit) Done() <-chan struct{} { return c.done }

// Wait waits for the commit's acknowledgement (or ctx), applies it (and
// every commit before it) to the DB, and returns its error.
func (c *Commit) Wait(ctx context.Context) error {
	select {
	case <-c.done:
		return c.r.Apply(c)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Position is the chain position after this commit (LogID set once
// acknowledged). Valid after Done is closed.
func (c *Commit) Position() Position {
	<-c.done
	return c.pos
}

// Recorder is the log's single writer after a successful Handoff. It appends
// records continuing its own chain and applies them to the DB strictly in
// order, each once the log acknowledged it.
//
// Commits are pipelined: Commit hands the records to the WAL and returns;
// the appends of successive commits are in flight together, in call order.
// The WAL reports acknowledgements in call order, so acknowledged commits are
// always a prefix of the commits made; a commit is applied (its batch plus
// the new Position, in one DB write) by whoever waits for it — Apply, or
// Commit.Wait — after every earlier commit, on the waiter's goroutine: the
// WAL's reply goroutine never writes to the DB, and the Recorder has no
// goroutine of its own. After any error — an append failing (wal.ErrFenced
// once a newer writer took over, a cancelled context) or a DB write failing
// — the Recorder is broken: that commit, every commit still in flight and
// every later one fail with the first error. Records acknowledged but not
// applied when it broke are still in the log; the next replay applies them
// (they are committed).
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

	mu        sync.Mutex
	unapplied []*Commit // handed to the log, not yet applied, in chain order
	applied   Position
	bytes     int64 // bytes of records applied so far
	err       error
	closed    bool
}

func newRecorder(log wal.WAL, db *grocksdb.DB, wo *grocksdb.WriteOptions, ownWO bool, pos Position, term uint64, logger hclog.Logger, shard string) *Recorder {
	return &Recorder{log: log, db: db, wo: wo, ownWO: ownWO, term: term, logger: logger, shard: shard, next: pos, applied: pos}
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
// DefaultChunkSize. Apply (or the Commit's Wait) applies it once
// acknowledged. batch is not retained: the caller may reuse or destroy it
// when Commit returns. ctx bounds the append.
func (r *Recorder) Commit(ctx context.Context, batch *grocksdb.WriteBatch) *Commit {
	src := batch.Data()
	data := append(make([]byte, 0, len(src)+txnTailRoom), src...) // room for applyToDB's position put
	return r.commit(ctx, KindTxn, data, nil)
}

// CommitSnapshot appends a Snapshot record pointing at manifest and
// covering the log up to id, in order with the Txns, and resolves like a
// Txn commit (it changes only the stored Position).
func (r *Recorder) CommitSnapshot(ctx context.Context, manifest string, covers message.MessageID) *Commit {
	return r.commit(ctx, KindSnapshot, nil, &Record{Kind: KindSnapshot, Manifest: manifest, Covers: uint64(covers)})
}

func (r *Recorder) commit(ctx context.Context, kind Kind, data []byte, rec *Record) *Commit {
	c := &Commit{r: r, done: make(chan struct{}), kind: kind, data: data}
	r.appendMu.Lock()
	defer r.appendMu.Unlock()

	r.mu.Lock()
	if r.err != nil || r.closed {
		c.err = r.err
		if c.err == nil {
			c.err = ErrRecorderClosed
		}
		c.applied = true
		r.mu.Unlock()
		close(c.done)
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
	r.unapplied = append(r.unapplied, c)
	r.mu.Unlock()

	props := map[string]string{"recoverylog": kind.String()}
	for i, b := range recs {
		r.log.AppendAsync(ctx, message.MutableMessage{Payload: b, Properties: props}, func(res *wal.AppendResult, err error) {
			c.acked(i, res, err)
		})
	}
	return c
}

// acked records one record's outcome. It runs on the WAL's callback
// goroutine, one record at a time in append order, so it needs no lock and
// never touches the DB.
func (c *Commit) acked(part int, res *wal.AppendResult, err error) {
	if err != nil {
		if c.appendErr == nil {
			c.appendErr = fmt.Errorf("recoverylog: shard %s: append %s record seq %d (part %d): %w", c.r.shard, c.kind, c.pos.Seq, part, err)
		}
	} else if res != nil && res.MessageID > c.pos.LogID {
		c.pos.LogID = res.MessageID
	}
	if c.pending--; c.pending == 0 {
		close(c.done)
	}
}

// Apply applies c to the DB once the log acknowledged it, after every commit
// made before it (which the log acknowledged first), and returns c's error.
// It must be called after c.Done is closed; calling it again, or for a
// commit an earlier Apply already applied, just returns the outcome.
func (r *Recorder) Apply(c *Commit) error {
	<-c.done
	r.mu.Lock()
	defer r.mu.Unlock()
	for !c.applied {
		head := r.unapplied[0]
		select {
		case <-head.done:
		default:
			// The WAL reports acknowledgements in call order: c's being
			// done means every earlier one is.
			r.breakLocked(fmt.Errorf("recoverylog: shard %s: record seq %d acknowledged before seq %d: the WAL broke its order contract",
				r.shard, c.pos.Seq, head.pos.Seq))
			continue
		}
		r.unapplied[0] = nil
		r.unapplied = r.unapplied[1:]
		r.applyLocked(head)
	}
	return c.err
}

// applyLocked applies one acknowledged commit (or fails it, once broken).
// Called with mu held, in chain order.
func (r *Recorder) applyLocked(c *Commit) {
	c.applied = true
	if r.err == nil && c.appendErr != nil {
		r.breakLocked(c.appendErr)
	}
	if r.err != nil {
		c.err = r.err
		return
	}
	if err := applyToDB(r.db, r.wo, c.kind, c.data, c.pos); err != nil {
		r.breakLocked(fmt.Errorf("recoverylog: shard %s: apply %s record seq %d: %w", r.shard, c.kind, c.pos.Seq, err))
		c.err = r.err
		return
	}
	c.data = nil
	r.applied = c.pos
	r.bytes += int64(c.size)
	appendedBytesTotal.WithLabelValues(r.shard).Add(float64(c.size))
}

// breakLocked records the first error; every commit applied after it fails
// with it.
func (r *Recorder) breakLocked(err error) {
	if r.err != nil {
		return
	}
	r.err = err
	r.logger.Error("recorder broken", "error", err)
}

// Close stops accepting commits (later ones fail with ErrRecorderClosed),
// waits until every commit in flight was acknowledged or failed and applies
// those still unapplied, and returns the error that broke the Recorder, if
// any. It does not close the WAL (the caller's).
func (r *Recorder) Close() error {
	r.appendMu.Lock()
	r.mu.Lock()
	r.closed = true
	var last *Commit
	if n := len(r.unapplied); n > 0 {
		last = r.unapplied[n-1]
	}
	r.mu.Unlock()
	r.appendMu.Unlock()
	if last != nil {
		_ = r.Apply(last)
	}
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
