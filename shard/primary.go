package shard

import (
	"context"
	"errors"
	"fmt"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// source is one open source channel of a primary.
type source struct {
	part    topic.Partition
	channel string
	log     wal.WAL
	scanner wal.Scanner
	// sourceStart: where the primary started reading (after), and the
	// incarnation and reset term its commits record (sourcecheck.go).
	sourceStart
}

// inbound is a message read from a source, tagged with it.
type inbound struct {
	src *source
	msg message.ImmutableMessage
}

// runPrimary opens the sources after the offsets stored with the state,
// initialises the application, starts the lag tracker and the drainer, and
// runs the transaction loop until ctx is done or something fails. Each
// step's undo is deferred, so they unwind in reverse order.
func (r *replica) runPrimary(ctx context.Context, sdb *shardDB, consumer Consumer, rec *recoverylog.Recorder) (err error) {
	spec := r.currentSpec()
	defer func() {
		// Close waits for the commit in flight, if any.
		if cerr := rec.Close(); cerr != nil && err == nil && ctx.Err() == nil {
			err = fmt.Errorf("close recorder: %w", cerr)
		}
	}()

	offsets, err := recoverylog.LoadOffsets(sdb.db)
	if err != nil {
		return fmt.Errorf("load source offsets: %w", err)
	}
	srcs := &primarySources{in: make(chan inbound, 1024), stopped: make(chan *source, len(spec.Sources))}
	defer srcs.close()
	if err := r.openSources(ctx, srcs, spec, offsets); err != nil {
		return err
	}
	if err := r.recordSources(ctx, rec, srcs.sources); err != nil {
		return err
	}

	sh := &primaryShard{
		ctx: ctx, spec: spec, db: sdb.db, ro: sdb.ro, wo: sdb.wo,
		txn: grocksdb.NewWriteBatch(), open: newOverlay(),
	}
	defer func() { sh.txn.Destroy() }()
	halt, err := r.initShard(consumer, sh)
	if err != nil {
		return err
	}
	defer halt()

	lt, stopLag := r.startLag(ctx, srcs.sources)
	defer stopLag()
	r.serveQueries(&queryShard{ctx: ctx, spec: spec, db: sdb.db, ro: sdb.ro, wo: sdb.wo})
	defer r.serveQueries(nil)

	if err := applyOutputDrops(ctx, rec, sdb.db, sdb.ro, spec, r.logger); err != nil {
		return err
	}
	outs, err := r.startOutputs(ctx, sdb, sh)
	if err != nil {
		return err
	}
	defer outs.stop()
	defer outs.pub.limits.close() // after the loop, which stages

	load, stopLoad := r.svc.loads.add(spec.ID, r.assignment().CreateRevision)
	defer stopLoad()

	r.setState(ctx, allocator.StatePrimary, "")
	clk := r.svc.clock
	loop := &txnLoop{load: load,
		r: r, sh: sh, consumer: consumer, rec: rec, pub: outs.pub, drain: outs.drain, recorded: outs.published,
		clock: clk, core: txnCore{clock: clk}, gate: r.svc.commits,
		in: srcs.in, stopped: srcs.stopped, lag: lt, sources: srcs.byChannel(),
		maxBytes: r.svc.cfg.TxnMaxBytes, maxMessages: r.svc.cfg.TxnMaxMessages,
	}
	return loop.run(ctx)
}

// primarySources are a primary's open sources and the channels their
// scanners hand the transaction loop messages and stops on.
type primarySources struct {
	sources []*source
	in      chan inbound
	stopped chan *source // buffered: one slot per source
	cancel  context.CancelFunc
}

// openSources opens each of spec's sources and starts its scanner where
// startSource says: after the offset stored with the state, if the channel
// still holds it. The scanners verify (wal.ReadOption.Verify), so a loss
// while they run stops them too. Each scanner hands its messages to the
// loop through a sourceHandler, on the scanner's own goroutine: no relay in
// between. srcs.close undoes what was opened, also after an error.
func (r *replica) openSources(ctx context.Context, srcs *primarySources, spec *Spec, offsets map[string]recoverylog.SourceOffset) error {
	srcCtx, cancel := context.WithCancel(ctx)
	srcs.cancel = cancel
	for _, sp := range spec.Sources {
		src := &source{part: topic.Partition{Topic: sp.Topic, Index: sp.Partition}, channel: sp.Channel()}
		var err error
		src.log, err = r.svc.cfg.Opener.Open(ctx, &wal.OpenOption{Channel: src.channel})
		if err != nil {
			return fmt.Errorf("open source %s: %w", src.channel, err)
		}
		srcs.sources = append(srcs.sources, src)
		b, err := src.log.Bounds(ctx)
		if err != nil {
			return fmt.Errorf("source %s: %w", src.channel, err)
		}
		committed, has := offsets[src.channel]
		if src.sourceStart, err = startSource(spec.ID, src.part, committed, has, spec.SourceReset(src.channel), b); err != nil {
			return err
		}
		if a := src.applied; a != nil {
			r.logger.Warn("applying the operator's source reset: reading the source after the id it names, not the committed offset",
				"channel", src.channel, "after", a.After, "from", a.From, "incarnation", a.Incarnation, "term", a.Term,
				"committed", committed.ID, "committed_incarnation", committed.Incarnation)
		}
		src.scanner, err = src.log.Read(srcCtx, wal.ReadOption{
			Name: spec.ID, DeliverPolicy: wal.DeliverStartAfter(src.after), Verify: true, Incarnation: src.inc,
			MesasgeHandler: &sourceHandler{src: src, in: srcs.in, stopped: srcs.stopped},
		})
		if err != nil {
			return asSourceLost(spec.ID, src, committed.ID, fmt.Errorf("read source %s after offset %d: %w", src.channel, src.after, err))
		}
		r.logger.Debug("source opened", "channel", src.channel, "after", src.after, "incarnation", src.inc)
	}
	return nil
}

// recordSources commits, before the primary consumes, the offsets that
// openSources decided and the state does not hold yet — a source reset
// applied, an incarnation not recorded before — so a failover or restart
// finds them even if no message comes. Nothing to record: no commit.
func (r *replica) recordSources(ctx context.Context, rec *recoverylog.Recorder, sources []*source) error {
	batch := grocksdb.NewWriteBatch()
	defer batch.Destroy()
	for _, s := range sources {
		if s.record {
			recoverylog.PutOffset(batch, s.channel, s.offset(s.after))
		}
	}
	if batch.Count() == 0 {
		return nil
	}
	if err := rec.Commit(ctx, batch).Wait(ctx); err != nil {
		return fmt.Errorf("recording the source offsets: %w", err)
	}
	return nil
}

// offset is what a commit records of the source having consumed up to id.
func (s *source) offset(id message.MessageID) recoverylog.SourceOffset {
	return recoverylog.SourceOffset{ID: id, Incarnation: s.inc, ResetTerm: s.resetTerm}
}

// byChannel indexes the sources by channel, for the transaction loop.
func (srcs *primarySources) byChannel() map[string]*source {
	m := make(map[string]*source, len(srcs.sources))
	for _, s := range srcs.sources {
		m[s.channel] = s
	}
	return m
}

// close stops the scanners, then closes the sources' WALs.
func (srcs *primarySources) close() {
	if srcs.cancel != nil {
		srcs.cancel()
	}
	for _, s := range srcs.sources {
		if s.scanner != nil {
			_ = s.scanner.Close()
		}
	}
	for _, s := range srcs.sources {
		s.log.Close()
	}
}

// initShard runs the application's InitShard, if it has one, and returns
// what runs its HaltShard when the primary stops.
func (r *replica) initShard(consumer Consumer, sh *primaryShard) (halt func(), err error) {
	if si, ok := consumer.(ShardIniter); ok {
		if err := safeCall("InitShard", func() error { return si.InitShard(sh) }); err != nil {
			return nil, err
		}
	}
	sh2, ok := consumer.(ShardHalter)
	if !ok {
		return func() {}, nil
	}
	return func() {
		if herr := safeCall("HaltShard", func() error { sh2.HaltShard(sh); return nil }); herr != nil {
			r.logger.Error("halt shard", "error", herr)
		}
	}, nil
}

// startLag starts the primary's lag tracker from where the sources start
// and registers it with the service's lag refresher; stop unregisters it
// (no refresh of it runs once stop returned).
func (r *replica) startLag(ctx context.Context, sources []*source) (lt *lagTracker, stop func()) {
	committed := make(map[string]message.MessageID, len(sources))
	for _, s := range sources {
		committed[s.channel] = s.after
	}
	lt = &lagTracker{r: r, sources: sources, committed: committed}
	lt.refresh(ctx)
	return lt, r.svc.lags.add(ctx, lt)
}

// serveQueries makes q the shard queries read (nil: none).
func (r *replica) serveQueries(q *queryShard) {
	r.dbMu.Lock()
	r.query = q
	r.dbMu.Unlock()
}

// primaryOutputs are a primary's publisher and drainer.
type primaryOutputs struct {
	pub       *txnPublisher
	drain     *drainer
	published uint64 // outbox-published as the primary found it
	cancel    context.CancelFunc
}

// startOutputs makes the drainer: what earlier primaries committed is
// published first, a page at a time, then what this one commits
// (drain.go). Its goroutine starts at once when there is such a backlog,
// else with the first transaction that has outputs. The publisher vets each output partition with the drainer
// before it first stages to it (outcheck.go).
func (r *replica) startOutputs(ctx context.Context, sdb *shardDB, sh *primaryShard) (*primaryOutputs, error) {
	ob, err := loadOutboxState(sdb.db, sdb.ro)
	if err != nil {
		return nil, err
	}
	records, err := loadChanRecords(sdb.db, sdb.ro)
	if err != nil {
		return nil, err
	}
	st := ob // the publisher's copy: it moves on; the backlog's stays
	// Outputs are opened as their topic records allow (outlimits.go).
	opener := &outputOpener{Opener: r.svc.cfg.Opener, shard: sh.spec.ID, lookup: r.svc.cfg.Topics}
	o := &primaryOutputs{
		drain: newDrainer(drainConfig{shard: sh.spec.ID, opener: opener, ownLast: ob.last,
			retired: ob.retiredEpochs(sh.spec.LogResetTerm), records: records, logger: r.logger,
			gauge: metricUnpublished.WithLabelValues(sh.spec.ID)},
			ob.published, r.svc.clock),
		published: ob.published,
	}
	o.pub = &txnPublisher{sh: sh, topics: &topicCache{lookup: r.svc.cfg.Topics}, st: st, check: o.drain.prepare,
		limits: &outputLimits{opener: opener}}
	drainCtx, cancel := context.WithCancel(ctx)
	o.cancel = cancel
	o.drain.startLazily(drainCtx, newOutboxBacklog(sdb.db, sdb.ro, &ob))
	if ob.last > ob.published {
		r.logger.Info("publishing outputs committed by an earlier primary", "from_txn", ob.published+1, "to_txn", ob.last)
		o.drain.startRun()
	}
	return o, nil
}

// stop ends the drainer and waits for it.
func (o *primaryOutputs) stop() {
	o.cancel()
	o.drain.stopRun()
	metricUnpublished.DeleteLabelValues(o.drain.shard)
}

// sourceHandler is the MessageHandler of a primary's source scanner: it
// hands each message, tagged with its source, to the transaction loop, and
// says when the scanner stopped.
type sourceHandler struct {
	src     *source
	in      chan<- inbound
	stopped chan<- *source           // buffered: one slot per source
	buf     message.ImmutableMessage // Incoming points here (the scanner copies it)
}

func (h *sourceHandler) Handle(p wal.HandleParam) wal.HandleResult {
	if p.Message != nil {
		select {
		case h.in <- inbound{src: h.src, msg: *p.Message}:
			return wal.HandleResult{MessageHandled: true}
		case <-p.Ctx.Done():
			return wal.HandleResult{Error: p.Ctx.Err()}
		}
	}
	select {
	case m, ok := <-p.Upstream:
		if !ok {
			return wal.HandleResult{Error: wal.ErrUpstreamClosed}
		}
		h.buf = m
		return wal.HandleResult{Incoming: &h.buf}
	case <-p.Ctx.Done():
		return wal.HandleResult{Error: p.Ctx.Err()}
	}
}

// Close runs once, when the scanner stops (for whatever reason).
func (h *sourceHandler) Close() { h.stopped <- h.src }

// stopErr is why a source's scanner stopped.
func (s *source) stopErr() error {
	<-s.scanner.Done()
	err := s.scanner.Error()
	if err == nil {
		err = errors.New("scanner ended")
	}
	return fmt.Errorf("source %s: %w", s.channel, err)
}
