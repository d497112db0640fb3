package recoverylog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/writebatch"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// PlayerConfig configures a Player.
type PlayerConfig struct {
	// Log is the shard's recovery-log channel, opened with term 0 (the
	// player only reads it). The caller owns it and closes it after Play returned.
	Log wal.WAL
	// DB is the shard's RocksDB. Player and Recorder are its only writers.
	DB *grocksdb.DB
	// WriteOptions are used for every apply. They should disable RocksDB's
	// WAL (the recovery log is the WAL); nil means a default with
	// DisableWAL(true), owned by the Player (and then the Recorder).
	WriteOptions *grocksdb.WriteOptions
	// Logger receives structured logs with the field "shard".
	Logger hclog.Logger
	// ShardID names the shard in logs and metrics.
	ShardID string
	// ProgressInterval is how often a replay that has not caught up yet logs
	// its progress (0: DefaultProgressInterval).
	ProgressInterval time.Duration
}

// Player replays a recovery log into a DB and keeps tailing it; Handoff
// turns it into the log's writer (a Recorder).
type Player struct {
	cfg    PlayerConfig
	wo     *grocksdb.WriteOptions
	ownWO  bool
	logger hclog.Logger

	caughtUp     chan struct{}
	caughtUpOnce sync.Once
	done         chan struct{}

	mu      sync.Mutex
	started bool
	pos     Position
	target  message.MessageID // the log's last id when Play started
	handoff *handoffState
	err     error // Play's result, set before done is closed
}

// handoffState is shared between Handoff and the Play loop.
type handoffState struct {
	term    uint64
	author  string
	reports []fenceReport
	notify  chan struct{} // cap 1: a report was added
	won     bool
	wonPos  Position
}

// fenceReport is the Play loop's verdict on one of the handoff's own fences.
type fenceReport struct {
	id      message.MessageID
	applied bool
}

// NewPlayer returns a Player; call Play to start it.
func NewPlayer(cfg PlayerConfig) *Player {
	p := &Player{cfg: cfg, wo: cfg.WriteOptions, caughtUp: make(chan struct{}), done: make(chan struct{})}
	if p.wo == nil {
		p.wo = grocksdb.NewDefaultWriteOptions()
		p.wo.DisableWAL(true)
		p.ownWO = true
	}
	p.logger = cfg.Logger
	if p.logger == nil {
		p.logger = hclog.NewNullLogger()
	}
	p.logger = p.logger.With("shard", cfg.ShardID)
	if !p.wo.IsDisableWAL() {
		p.logger.Warn("RocksDB WAL enabled for recovery-log applies; the recovery log already is the WAL (slower, no safer)")
	}
	return p
}

// CaughtUp is closed once Play applied (or skipped) every record up to the
// log's last id as seen when Play started — at once for an empty log.
func (p *Player) CaughtUp() <-chan struct{} { return p.caughtUp }

// Done is closed when Play has returned.
func (p *Player) Done() <-chan struct{} { return p.done }

// Position is the chain position applied to the DB so far.
func (p *Player) Position() Position {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pos
}

func (p *Player) markCaughtUp(start time.Time) {
	p.caughtUpOnce.Do(func() {
		d := time.Since(start)
		replayDuration.Observe(d.Seconds())
		p.logger.Debug("recovery log replay caught up", "position", p.Position().String(), "duration", d)
		close(p.caughtUp)
	})
}

// ErrLogBehind is Play's error when the recovery log ends before the
// position the database has applied: the log lost records.
var ErrLogBehind = errors.New("the recovery log is behind the local database (it lost records)")

// Target is the log's last id when Play started (0 before): the replay has
// caught up once Position().LogID reaches it. With Position it tells how
// far a BACKFILL is.
func (p *Player) Target() message.MessageID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// Play replays the log from LoadPosition(DB), applying only records that
// extend the chain, each in one DB write together with the new Position.
// CaughtUp closes when it reached the log's last id seen at start; Play then
// keeps tailing. It returns ctx.Err() when ctx ends, nil once a Handoff
// completed (its own Fence applied), or an error: the scanner stopped (an
// error wrapping wal.ErrTruncated when the DB's position was truncated from
// the log — rebuild from a snapshot), a record failed to decode, or a DB
// write failed, or the log ends before the DB's position (ErrLogBehind).
// Play may be called once.
func (p *Player) Play(ctx context.Context) (err error) {
	if err := p.begin(); err != nil {
		return err
	}
	defer func() { p.finish(err) }()
	start := time.Now()
	pos, lastID, err := p.startPosition(ctx)
	if err != nil {
		return err
	}
	sc, err := p.openLog(ctx, pos)
	if err != nil {
		return err
	}
	defer sc.Close()
	p.logger.Debug("recovery log replay started", "position", pos.String(), "last_id", lastID)
	if lastID <= pos.LogID {
		p.markCaughtUp(start)
	}
	return p.newReplay(sc, pos, lastID, start).run(ctx)
}

// begin marks Play started, or fails if it was already.
func (p *Player) begin() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return errors.New("recoverylog: Play called twice")
	}
	p.started = true
	return nil
}

// finish records Play's result err, releases the write options the Player
// owns unless a won handoff passed them to its Recorder, and closes done.
func (p *Player) finish(err error) {
	p.mu.Lock()
	p.err = err
	won := p.handoff != nil && p.handoff.won
	p.mu.Unlock()
	if p.ownWO && !won {
		p.wo.Destroy()
	}
	close(p.done)
}

// startPosition loads the DB's position and the log's last id, and
// publishes them as Position and Target. It fails with ErrLogBehind when
// the log ends before the DB's position.
func (p *Player) startPosition(ctx context.Context) (Position, message.MessageID, error) {
	shard := p.cfg.ShardID
	pos, err := LoadPosition(p.cfg.DB)
	if err != nil {
		return Position{}, 0, fmt.Errorf("recoverylog: shard %s: %w", shard, err)
	}
	p.mu.Lock()
	p.pos = pos
	p.mu.Unlock()
	lastID, err := p.cfg.Log.LastID(ctx)
	if err != nil {
		return Position{}, 0, fmt.Errorf("recoverylog: shard %s: last id of %s: %w", shard, p.cfg.Log.Channel(), err)
	}
	p.mu.Lock()
	p.target = lastID
	p.mu.Unlock()
	// LastID never goes down (not even when Truncate removed everything),
	// so a log that ends before the DB's position lost records the DB has
	// applied: the NATS store was deleted, the stream recreated, a backup
	// restored. Waiting for the log to grow back would wedge the replica.
	if lastID < pos.LogID {
		return Position{}, 0, fmt.Errorf("recoverylog: shard %s: %w: %s ends at id %d, but the local database has applied it up to %v",
			shard, ErrLogBehind, p.cfg.Log.Channel(), lastID, pos)
	}
	return pos, lastID, nil
}

// openLog opens a scanner on the log from right after pos (from its start
// for an empty DB). The caller closes it.
func (p *Player) openLog(ctx context.Context, pos Position) (wal.Scanner, error) {
	policy := wal.DeliverAll()
	if pos.LogID != 0 {
		policy = wal.DeliverStartAfter(pos.LogID)
	}
	sc, err := p.cfg.Log.Read(ctx, wal.ReadOption{Name: "recoverylog-player/" + p.cfg.ShardID, DeliverPolicy: policy})
	if err != nil {
		return nil, fmt.Errorf("recoverylog: shard %s: replay from %v: %w", p.cfg.ShardID, pos, err)
	}
	return sc, nil
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// applyToDB writes an applied record to db in one write: a Txn's batch plus
// Put(PositionKey, pos); other kinds only the position. With RocksDB's WAL
// disabled the write lands in one memtable, so state and position are lost
// or kept together on a crash, and replay resumes from the stored position.
//
// A Txn's position put is appended to the serialized batch here
// (writebatch.AppendPut), in place when data has the room (the Recorder
// reserves it: txnTailRoom) — data's bytes are the caller's to give up — so
// the batch is copied into RocksDB once; a Put on the batch RocksDB made
// from it would grow and copy the whole batch again.
func applyToDB(db *grocksdb.DB, wo *grocksdb.WriteOptions, kind Kind, data []byte, pos Position) error {
	var wb *grocksdb.WriteBatch
	if kind == KindTxn {
		full, err := writebatch.AppendPut(data, PositionKey, EncodePosition(pos))
		if err != nil {
			return fmt.Errorf("%w: txn batch: %w", ErrBadRecord, err)
		}
		wb = grocksdb.WriteBatchFrom(full)
	} else {
		wb = grocksdb.NewWriteBatch()
		wb.Put(PositionKey, EncodePosition(pos))
	}
	defer wb.Destroy()
	if err := db.Write(wo, wb); err != nil {
		return fmt.Errorf("write to DB: %w", err)
	}
	return nil
}

// txnTailRoom is the spare capacity a Txn's batch needs for its position
// put.
var txnTailRoom = writebatch.PutLen(len(PositionKey), positionLen)

// Handoff makes this replica the log's writer. Call it while Play runs;
// it waits for CaughtUp first. It appends a Fence record (term, author)
// continuing the chain at the player's position through w, a WAL the caller
// opened on the same channel with term (which fences older writers at the
// backend: their appends fail with wal.ErrFenced from then on), then waits
// until Play reads that fence. If the fence extends the chain, Play applies
// it and returns nil, and Handoff returns a Recorder positioned right after
// it. If it does not (a record of the old writer that was acknowledged before
// the fence landed first and extended the chain — it is committed and Play
// applies it), Handoff appends a new fence from the newer position, and so
// on: the applied fence defines the handoff point. No timeouts are involved.
//
// term must be positive and not below the highest fence term in the log.
// Handoff fails if ctx ends, the append fails, or Play stops first. w stays
// owned by the caller (the Recorder appends through it; close it after
// Recorder.Close).
func (p *Player) Handoff(ctx context.Context, w wal.WAL, term uint64, author string) (*Recorder, error) {
	shard := p.cfg.ShardID
	if w == nil || term == 0 {
		return nil, fmt.Errorf("recoverylog: shard %s: handoff needs a WAL and a positive term (got term %d)", shard, term)
	}
	select {
	case <-p.caughtUp:
	case <-p.done:
		return nil, p.stoppedErr()
	case <-ctx.Done():
		return nil, fmt.Errorf("recoverylog: shard %s: handoff waiting for replay: %w", shard, ctx.Err())
	}
	p.mu.Lock()
	if p.handoff != nil {
		p.mu.Unlock()
		return nil, fmt.Errorf("recoverylog: shard %s: a handoff is already in progress", shard)
	}
	if term < p.pos.Term {
		cur := p.pos.Term
		p.mu.Unlock()
		return nil, fmt.Errorf("recoverylog: shard %s: handoff term %d is below the log's fence term %d", shard, term, cur)
	}
	hs := &handoffState{term: term, author: author, notify: make(chan struct{}, 1)}
	p.handoff = hs
	p.mu.Unlock()
	success := false
	defer func() {
		if !success {
			p.mu.Lock()
			if !hs.won {
				p.handoff = nil
			}
			p.mu.Unlock()
		}
	}()

	seen := 0
	for attempt := 1; ; attempt++ {
		pos := p.Position()
		enc, _ := encodeNext(pos, Record{Kind: KindFence, Term: term, Author: author})
		res, err := w.Append(ctx, message.MutableMessage{Payload: enc, Properties: map[string]string{"recoverylog": "fence"}})
		if err != nil {
			return nil, fmt.Errorf("recoverylog: shard %s: append fence (term %d, attempt %d): %w", shard, term, attempt, err)
		}
		appendedBytesTotal.WithLabelValues(shard).Add(float64(len(enc)))
		p.logger.Debug("fence appended", "term", term, "author", author, "log_id", res.MessageID, "attempt", attempt, "after", pos.String())
		retry := false
		for !retry {
			p.mu.Lock()
			reports := hs.reports[seen:]
			won, wonPos := hs.won, hs.wonPos
			p.mu.Unlock()
			seen += len(reports)
			if won {
				select {
				case <-p.done:
				case <-ctx.Done():
					return nil, fmt.Errorf("recoverylog: shard %s: handoff waiting for the player to stop: %w", shard, ctx.Err())
				}
				success = true
				return newRecorder(w, p.cfg.DB, p.wo, p.ownWO, wonPos, term, p.logger, shard), nil
			}
			for _, r := range reports {
				if r.id >= res.MessageID {
					retry = true
				}
			}
			if retry {
				break
			}
			select {
			case <-hs.notify:
			case <-p.done:
				p.mu.Lock()
				won = hs.won
				p.mu.Unlock()
				if !won {
					return nil, p.stoppedErr()
				}
			case <-ctx.Done():
				return nil, fmt.Errorf("recoverylog: shard %s: handoff waiting for its fence at log id %d: %w", shard, res.MessageID, ctx.Err())
			}
		}
		p.logger.Info("fence did not extend the chain; retrying from the newer position", "term", term, "log_id", res.MessageID)
	}
}

func (p *Player) stoppedErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return fmt.Errorf("recoverylog: shard %s: player stopped: %w", p.cfg.ShardID, p.err)
	}
	return fmt.Errorf("recoverylog: shard %s: player stopped", p.cfg.ShardID)
}
