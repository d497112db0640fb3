package shard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// replica is one assigned shard replica on this member. Its goroutine (run)
// owns the database, the recovery log and, as primary, the source scanners
// and the application; other goroutines read its status under mu.
type replica struct {
	svc    *Service
	id     string
	logger hclog.Logger
	prev   *replica // an earlier replica of this shard that must release the DB first

	cancel    context.CancelFunc
	done      chan struct{}
	promoteCh chan struct{} // signalled when the assignment is (or becomes) slot 0

	pubMu sync.Mutex // serializes status writes to etcd

	mu      sync.Mutex
	asg     allocator.Assignment
	raw     []byte
	spec    *Spec
	app     App
	state   allocator.ReplicaState // "" before the first state and after clearState
	errText string
	lag     map[string]int64
	offsets map[string]message.MessageID // committed source offsets (primaries)
	applied int64                        // recovery-log id applied, for ReplicaStatus.Revision
	// position reads the live applied position (the player's, then the
	// recorder's); nil when no database is open.
	position func() recoverylog.Position
	// replayTo is the player's Target while a player runs (nil otherwise).
	replayTo func() message.MessageID
	// stats are a primary's commit and snapshot figures (primarystats.go).
	stats primaryStats

	// dbMu guards query access to a primary's database: queries hold it
	// shared; the replica takes it exclusively to stop serving them.
	dbMu  sync.RWMutex
	query *queryShard
}

// needsRestart reports whether a new assignment or spec of the same shard
// needs a fresh replica rather than an update of this one.
func (r *replica) needsRestart(a allocator.Assignment, raw []byte) bool {
	r.mu.Lock()
	old, state, spec, oldRaw := r.asg, r.state, r.spec, r.raw
	r.mu.Unlock()
	if a.CreateRevision != old.CreateRevision && state == allocator.StateFailed {
		return true // a new assignment key gives a failed replica a new attempt
	}
	if old.Slot == 0 && (a.Slot != 0 || a.CreateRevision != old.CreateRevision) {
		return true // demoted, or a new primary term: start over as that
	}
	if !bytes.Equal(raw, oldRaw) {
		ns, err := decodeSpec(a.Item, raw)
		if err != nil || spec == nil || !sameSources(ns, spec) {
			return true
		}
	}
	return false
}

// update records a changed assignment or spec that needs no restart:
// promotion from standby to slot 0, a moved standby slot, changed
// transaction durations.
func (r *replica) update(ctx context.Context, a allocator.Assignment, raw []byte) {
	r.mu.Lock()
	old := r.asg
	r.asg = a
	if !bytes.Equal(raw, r.raw) {
		if ns, err := decodeSpec(a.Item, raw); err == nil {
			r.spec = ns
			r.raw = append([]byte(nil), raw...)
		}
	}
	state := r.state
	r.mu.Unlock()
	if old.Slot != 0 && a.Slot == 0 {
		r.logger.Debug("promoted to primary", "term", a.CreateRevision)
		select {
		case r.promoteCh <- struct{}{}:
		default:
		}
	}
	if a.CreateRevision != old.CreateRevision && state != "" && state != allocator.StateFailed {
		// A new key (e.g. a moved standby slot): restate our status there.
		r.svc.wg.Add(1)
		go func() {
			defer r.svc.wg.Done()
			r.publishStatus(ctx)
		}()
	}
}

func (r *replica) assignment() allocator.Assignment {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asg
}

func (r *replica) currentSpec() *Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.spec
}

// setState moves the replica to st and writes its status to etcd.
func (r *replica) setState(ctx context.Context, st allocator.ReplicaState, errText string) {
	r.mu.Lock()
	if r.state != "" {
		metricStatus.WithLabelValues(string(r.state)).Dec()
	}
	r.state, r.errText = st, errText
	metricStatus.WithLabelValues(string(st)).Inc()
	r.mu.Unlock()
	r.logger.Debug("replica state", "state", st)
	r.publishStatus(ctx)
}

// publishStatus writes the current state to the assignment key. Writes are
// serialized and each reads the state when it starts, so the last write is
// always the latest state (a restatement racing a state change cannot
// leave a stale state in etcd). A failure is logged: the key may be gone
// (the assignment moved) or the lease lost.
func (r *replica) publishStatus(ctx context.Context) {
	r.pubMu.Lock()
	defer r.pubMu.Unlock()
	r.mu.Lock()
	a := r.asg
	st := allocator.ReplicaStatus{State: r.state, Error: r.errText, Revision: r.applied}
	r.mu.Unlock()
	if st.State == "" {
		return
	}
	uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.svc.cfg.Member.UpdateStatus(uctx, a, st); err != nil {
		r.logger.Warn("write replica status", "state", st.State, "error", err)
	}
}

// clearState drops the replica from the status gauge (it is no longer
// assigned here).
func (r *replica) clearState() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != "" {
		metricStatus.WithLabelValues(string(r.state)).Dec()
		r.state = ""
	}
	for ch := range r.lag {
		metricSourceLag.DeleteLabelValues(r.id, ch)
	}
}

// fail records err as FAILED in etcd, cut by allocator.TruncateError here
// already so that /v1/status shows the text etcd holds.
func (r *replica) fail(err error) {
	r.logger.Error("replica failed", "error", err)
	metricFailures.WithLabelValues(r.id).Inc()
	var lost *sourceLostError
	if errors.As(err, &lost) {
		metricSourceLost.WithLabelValues(r.id, lost.lost.Channel).Inc()
	}
	// The replica's own context may be over; the write gets 10 s, but no
	// longer than the member's session: once its lease is lost the
	// assignment key is gone too, and waiting would only delay the rejoin.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { // owned here: ends with ctx (cancelled on return)
		select {
		case <-r.svc.cfg.Member.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	r.setState(ctx, allocator.StateFailed, allocator.TruncateError(err.Error()))
}

func (r *replica) info() ReplicaInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	ri := ReplicaInfo{Shard: r.id, Slot: r.asg.Slot, State: r.state, Error: r.errText}
	if r.spec != nil {
		ri.App = r.spec.App
	}
	if r.position != nil {
		ri.Applied = r.position().LogID
	}
	if r.replayTo != nil && r.state == allocator.StateBackfill {
		ri.ReplayTo = r.replayTo()
	}
	if len(r.lag) > 0 {
		ri.Lag = make(map[string]int64, len(r.lag))
		for k, v := range r.lag {
			ri.Lag[k] = v
		}
	}
	if len(r.offsets) > 0 {
		ri.Offsets = make(map[string]message.MessageID, len(r.offsets))
		for k, v := range r.offsets {
			ri.Offsets[k] = v
		}
	}
	r.stats.fillStats(&ri)
	return ri
}

func (r *replica) queryAccess() (Shard, func(), bool) {
	r.dbMu.RLock()
	if r.query == nil {
		r.dbMu.RUnlock()
		return nil, nil, false
	}
	var once sync.Once
	return r.query, func() { once.Do(r.dbMu.RUnlock) }, true
}

// run is the replica's goroutine. It returns when ctx is cancelled or the
// replica failed (then its state is FAILED with the error).
func (r *replica) run(ctx context.Context) {
	defer close(r.done)
	if r.prev != nil {
		select {
		case <-r.prev.done:
		case <-ctx.Done():
			return
		}
	}
	// Restart after a snapshot restore (a standby behind a truncated log)
	// or a transient failure (transient.go); else the error stands.
	restarts := restartBackoff.Start()
	var err error
	for rebootstraps := 0; ; {
		start := time.Now()
		err = r.lifecycle(ctx)
		if r.rebootstrap(ctx, err, rebootstraps+1) {
			rebootstraps++
		} else if !r.restartAfter(ctx, err, time.Since(start), restarts) {
			break
		}
		// The new lifecycle is promoted at once if the slot is still 0:
		// the failed one may have taken the signal.
		if r.assignment().Slot == 0 {
			select {
			case r.promoteCh <- struct{}{}:
			default:
			}
		}
	}
	switch {
	case err == nil || ctx.Err() != nil:
		r.logger.Debug("replica stopped", "error", err)
		r.clearState()
	default:
		r.fail(err)
	}
}

// lifecycle is BACKFILL → STANDBY → (on slot 0) PRIMARY. It returns ctx's
// error when stopped, or the error that fails the replica.
func (r *replica) lifecycle(ctx context.Context) error {
	spec := r.currentSpec()
	r.setState(ctx, allocator.StateBackfill, "")

	var consumer Consumer
	if err := safeCall("NewConsumer", func() error {
		consumer = r.app.NewConsumer()
		if consumer == nil {
			return errors.New("returned nil")
		}
		return nil
	}); err != nil {
		return err
	}
	dir := filepath.Join(r.svc.cfg.DataDir, "shards", spec.ID)
	rlog, err := r.svc.cfg.Opener.Open(ctx, &wal.OpenOption{Channel: recoverylog.Channel(spec.ID)})
	if err != nil {
		return fmt.Errorf("open recovery log %s: %w", recoverylog.Channel(spec.ID), err)
	}
	defer rlog.Close()

	sdb, pl, err := r.replay(ctx, dir, consumer, rlog)
	if err != nil {
		return err
	}
	defer r.closeDB(sdb)
	defer pl.stop()

	r.setState(ctx, allocator.StateStandby, "")
	select {
	case <-r.promoteCh:
	case <-pl.done:
		err := pl.err
		if err == nil {
			err = errors.New("player stopped without handoff")
		}
		if errors.Is(err, wal.ErrTruncated) {
			err = fmt.Errorf("%w: %w", errStandbyBehind, err)
		}
		return fmt.Errorf("tail recovery log: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	}

	// Handoff: the term is the slot-0 key's CreateRevision (plus the term
	// base), which only grows.
	a := r.assignment()
	term, err := r.handoffTerm(ctx, a, pl.player.Position().Term)
	if err != nil {
		return err
	}
	w, err := r.svc.cfg.Opener.Open(ctx, &wal.OpenOption{Channel: recoverylog.Channel(spec.ID), Term: term})
	if err != nil {
		return fmt.Errorf("open recovery log %s with term %d: %w", recoverylog.Channel(spec.ID), term, err)
	}
	defer w.Close()
	author := r.svc.cfg.Member.Zone() + "/" + r.svc.cfg.Member.ID()
	start := time.Now()
	rec, err := pl.player.Handoff(ctx, w, term, author)
	if err != nil {
		return fmt.Errorf("handoff with term %d: %w", term, err)
	}
	if err := pl.wait(); err != nil && ctx.Err() == nil {
		_ = rec.Close()
		return fmt.Errorf("recovery log player after handoff: %w", err)
	}
	r.mu.Lock()
	r.position = rec.Position
	r.mu.Unlock()
	r.logger.Info("handoff complete", "term", term, "position", rec.Position().String(), "took", time.Since(start))
	stopStats := r.startStats(rec, r.snapshots() != nil)
	defer stopStats() // after the snapshots and the transaction loop stopped
	stopSnapshots := r.startSnapshots(ctx, sdb, rec, w, a, term)
	defer stopSnapshots()
	return r.runPrimary(ctx, sdb, consumer, rec)
}

// player is a running recoverylog.Player and its goroutine.
type player struct {
	player *recoverylog.Player
	cancel context.CancelFunc
	done   chan struct{} // closed when Play returned; err is then its result
	err    error
}

func startPlayer(ctx context.Context, cfg recoverylog.PlayerConfig) *player {
	pctx, cancel := context.WithCancel(ctx)
	p := &player{player: recoverylog.NewPlayer(cfg), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.err = p.player.Play(pctx)
	}()
	return p
}

// wait waits for Play to return and gives its result.
func (p *player) wait() error {
	<-p.done
	return p.err
}

func (p *player) stop() {
	p.cancel()
	<-p.done
}

// replay opens the database and replays the recovery log into it until
// caught up. A damaged local database is moved aside and rebuilt once
// (damaged.go); one whose position the log no longer has (the log was
// truncated past it) is wiped and rebuilt once.
func (r *replica) replay(ctx context.Context, dir string, c Consumer, rlog wal.WAL) (*shardDB, *player, error) {
	restored, err := r.restoreSnapshot(ctx, dir, c, true)
	if err != nil {
		// Not fatal yet: the log may still hold the local position. If it
		// does not, recoverTruncated tries again and fails the replica.
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		r.logger.Warn("restoring the newest snapshot failed; replaying the recovery log instead", "error", err)
	}
	movedAside, rebuiltTruncated, resetLog := false, false, false
	for {
		_, statErr := os.Stat(filepath.Join(dir, "CURRENT"))
		existed := statErr == nil
		sdb, pos, err := r.openAt(dir, c)
		if err != nil {
			if movedAside || !isDamaged(err) {
				return nil, nil, err
			}
			if err := r.moveAside(ctx, dir, c, err); err != nil {
				return nil, nil, err
			}
			movedAside = true
			continue
		}
		// Say why the local database was or was not reused: the first
		// question when a BACKFILL takes long.
		local := "reusing the local database"
		switch {
		case restored:
			local = "restored the newest snapshot (it covers more of the log than the local database did)"
			restored = false
		case !existed:
			local = "no local database here: replaying the whole log"
		case pos == (recoverylog.Position{}):
			local = "the local database is empty: replaying the whole log"
		}
		r.logger.Info("replaying recovery log", "from", pos.String(), "dir", dir, "local_db", local)
		pl := startPlayer(ctx, recoverylog.PlayerConfig{
			Log: rlog, DB: sdb.db, WriteOptions: sdb.wo, Logger: r.logger, ShardID: r.id,
		})
		r.mu.Lock()
		r.position, r.replayTo = pl.player.Position, pl.player.Target
		r.mu.Unlock()
		start := time.Now()
		select {
		case <-pl.player.CaughtUp():
			r.mu.Lock()
			r.applied = int64(pl.player.Position().LogID)
			r.mu.Unlock()
			r.logger.Info("caught up", "position", pl.player.Position().String(), "took", time.Since(start))
			return sdb, pl, nil
		case <-ctx.Done():
			pl.stop()
			r.closeDB(sdb)
			return nil, nil, ctx.Err()
		case <-pl.done:
			err := pl.err
			r.closeDB(sdb)
			if err == nil {
				err = errors.New("player stopped before catching up")
			}
			if !resetLog && errors.Is(err, recoverylog.ErrLogBehind) {
				if rerr := r.logBehind(dir, pos, err); rerr != nil {
					return nil, nil, rerr
				}
				resetLog = true
				continue
			}
			if !rebuiltTruncated && errors.Is(err, wal.ErrTruncated) {
				if rerr := r.recoverTruncated(ctx, dir, c, pos, err); rerr != nil {
					return nil, nil, rerr
				}
				rebuiltTruncated = true
				continue
			}
			return nil, nil, fmt.Errorf("replay recovery log: %w", err)
		}
	}
}

// openAt opens the database at dir and loads its recovery-log position. A
// position that does not decode is damage (errDamagedDB), like a file
// RocksDB reports corrupt.
func (r *replica) openAt(dir string, c Consumer) (*shardDB, recoverylog.Position, error) {
	sdb, err := openShardDB(dir, c, r.svc.cfg.Memory, r.logger)
	if err != nil {
		return nil, recoverylog.Position{}, err
	}
	pos, err := recoverylog.LoadPosition(sdb.db)
	if err != nil {
		r.closeDB(sdb)
		return nil, recoverylog.Position{}, fmt.Errorf("load recovery-log position of %s: %w: %w", dir, errDamagedDB, err)
	}
	return sdb, pos, nil
}

// closeDB stops query access and closes the database.
func (r *replica) closeDB(sdb *shardDB) {
	r.dbMu.Lock()
	r.query = nil
	r.dbMu.Unlock()
	r.mu.Lock()
	r.position, r.replayTo = nil, nil
	r.mu.Unlock()
	sdb.Close()
}
