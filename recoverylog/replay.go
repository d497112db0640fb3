package recoverylog

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// replay is the loop of one Play: it reads the log's records, steps them
// through the FSM, applies what extends the chain and reports the
// handoff's fences.
type replay struct {
	p      *Player
	sc     wal.Scanner
	fsm    *FSM
	from   Position          // the DB's position when Play started
	lastID message.MessageID // the log's last id when Play started
	start  time.Time         // when Play started
	// first is true until the first record is read.
	first bool

	replayed prometheus.Counter
	applied  prometheus.Counter
	progress *replayProgress
}

func (p *Player) newReplay(sc wal.Scanner, pos Position, lastID message.MessageID, start time.Time) *replay {
	shard := p.cfg.ShardID
	return &replay{
		p: p, sc: sc, fsm: NewFSM(pos), from: pos, lastID: lastID, start: start, first: true,
		replayed: replayedBytesTotal.WithLabelValues(shard),
		applied:  replayedRecordsTotal.WithLabelValues(shard),
		progress: newReplayProgress(p.logger, shard, p.cfg.ProgressInterval, start, pos.LogID, lastID),
	}
}

// run plays the log's records until ctx ends (ctx.Err()), the handoff's
// fence is applied (nil), or a record cannot be read, decoded or applied
// (an error; see Play). It marks the replay caught up at the log's last id
// seen at start.
func (r *replay) run(ctx context.Context) error {
	for {
		m, err := r.next(ctx)
		if err != nil {
			return err
		}
		handedOff, err := r.play(m)
		if err != nil || handedOff {
			return err
		}
		if m.ID >= r.lastID {
			r.p.markCaughtUp(r.start)
		}
	}
}

// next is the scanner's next message, or ctx.Err() when ctx ends, or an
// error saying why the scanner stopped.
func (r *replay) next(ctx context.Context) (message.ImmutableMessage, error) {
	select {
	case <-ctx.Done():
		return message.ImmutableMessage{}, ctx.Err()
	case m, ok := <-r.sc.Chan():
		if ok {
			return m, nil
		}
	}
	<-r.sc.Done()
	if ctx.Err() != nil {
		return message.ImmutableMessage{}, ctx.Err()
	}
	return message.ImmutableMessage{}, fmt.Errorf("recoverylog: shard %s: recovery log scanner stopped at %v: %w", r.p.cfg.ShardID, r.fsm.Position(), r.sc.Error())
}

// play decodes m's record and steps it through the FSM, applying or
// skipping it. It reports whether the record was the handoff's own fence
// and was applied (Play is then done). A record that does not decode, or a
// log that starts after seq 1 for an empty DB (wal.ErrTruncated), is an
// error.
func (r *replay) play(m message.ImmutableMessage) (handedOff bool, err error) {
	shard := r.p.cfg.ShardID
	r.replayed.Add(float64(len(m.Payload)))
	r.progress.add(len(m.Payload), m.ID, time.Now())
	rec, err := Decode(m.Payload)
	if err != nil {
		return false, fmt.Errorf("recoverylog: shard %s: record at log id %d: %w", shard, m.ID, err)
	}
	if r.first && r.from.Seq == 0 && r.from.LogID == 0 && rec.Seq > 1 {
		return false, fmt.Errorf("recoverylog: shard %s: log starts at seq %d (id %d) but the DB is empty: %w", shard, rec.Seq, m.ID, wal.ErrTruncated)
	}
	r.first = false
	step := r.fsm.Step(rec, m.ID)
	if step.Discarded > 0 {
		r.p.logger.Warn("dropped an incomplete chunked transaction superseded by another record", "chunks", step.Discarded, "log_id", m.ID)
	}
	switch step.Decision {
	case Apply:
		return r.apply(rec, step, m.ID)
	case Skip:
		r.skip(rec, step, m.ID)
	}
	return false, nil
}

// apply writes step's record (rec, read at log id id) to the DB with the
// new position, publishes the position, and reports whether rec is the
// handoff's own fence; if so it records the win for Handoff and marks the
// replay caught up.
func (r *replay) apply(rec *Record, step Step, id message.MessageID) (won bool, err error) {
	p := r.p
	// Clipped: the record's bytes are the read message's, not ours to append into.
	if err := applyToDB(p.cfg.DB, p.wo, step.Kind, slices.Clip(step.Data), step.Position); err != nil {
		return false, fmt.Errorf("recoverylog: shard %s: apply %s record seq %d at log id %d: %w", p.cfg.ShardID, step.Kind, rec.Seq, id, err)
	}
	r.applied.Inc()
	p.mu.Lock()
	p.pos = step.Position
	hs := p.handoff
	won = hs != nil && rec.Kind == KindFence && rec.Term == hs.term && rec.Author == hs.author
	if won {
		hs.won, hs.wonPos = true, step.Position
		hs.reports = append(hs.reports, fenceReport{id: id, applied: true})
		notify(hs.notify)
	}
	p.mu.Unlock()
	if rec.Kind == KindFence {
		p.logger.Debug("fence applied", "term", rec.Term, "author", rec.Author, "log_id", id)
	}
	if won {
		p.markCaughtUp(r.start)
	}
	return won, nil
}

// skip counts and logs a skipped record (rec, read at log id id) and, when
// it is one of the handoff's own fences, reports it to Handoff as not
// applied.
func (r *replay) skip(rec *Record, step Step, id message.MessageID) {
	p := r.p
	skippedRecordsTotal.WithLabelValues(p.cfg.ShardID, string(step.Reason)).Inc()
	p.logger.Debug("skipped recovery-log record", "reason", step.Reason, "kind", rec.Kind, "seq", rec.Seq, "term", rec.Term, "log_id", id)
	if rec.Kind != KindFence {
		return
	}
	p.mu.Lock()
	if hs := p.handoff; hs != nil && rec.Term == hs.term && rec.Author == hs.author {
		hs.reports = append(hs.reports, fenceReport{id: id})
		notify(hs.notify)
	}
	p.mu.Unlock()
}
