package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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

	lt, stopLag := r.startLag(ctx, srcs.sources, offsets)
	defer stopLag()
	r.serveQueries(&queryShard{ctx: ctx, spec: spec, db: sdb.db, ro: sdb.ro, wo: sdb.wo})
	defer r.serveQueries(nil)

	outs, err := r.startOutputs(ctx, sdb, sh)
	if err != nil {
		return err
	}
	defer outs.stop()

	r.setState(ctx, allocator.StatePrimary, "")
	clk := r.svc.clock
	loop := &txnLoop{
		r: r, sh: sh, consumer: consumer, rec: rec, pub: outs.pub, drain: outs.drain, recorded: outs.published,
		clock: clk, core: txnCore{clock: clk},
		in: srcs.in, stopped: srcs.stopped, lag: lt,
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

// openSources opens each of spec's sources and starts its scanner after
// the offset stored with the state. Each scanner hands its messages to the
// loop through a sourceHandler, on the scanner's own goroutine: no relay in
// between. srcs.close undoes what was opened, also after an error.
func (r *replica) openSources(ctx context.Context, srcs *primarySources, spec *Spec, offsets map[string]message.MessageID) error {
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
		from := offsets[src.channel]
		src.scanner, err = src.log.Read(srcCtx, wal.ReadOption{
			Name: spec.ID, DeliverPolicy: wal.DeliverStartAfter(from),
			MesasgeHandler: &sourceHandler{src: src, in: srcs.in, stopped: srcs.stopped},
		})
		if err != nil {
			return fmt.Errorf("read source %s after offset %d: %w", src.channel, from, err)
		}
		r.logger.Debug("source opened", "channel", src.channel, "after", from)
	}
	return nil
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

// startLag starts the primary's lag tracker from the committed offsets; stop
// ends its goroutine and waits for it.
func (r *replica) startLag(ctx context.Context, sources []*source, offsets map[string]message.MessageID) (lt *lagTracker, stop func()) {
	committed := make(map[string]message.MessageID, len(offsets))
	for k, v := range offsets {
		committed[k] = v
	}
	lt = &lagTracker{r: r, sources: sources, committed: committed}
	lt.refresh(ctx)
	var wg sync.WaitGroup
	lagCtx, cancel := context.WithCancel(ctx)
	wg.Add(1)
	go func() { // owned here: stopped by stop
		defer wg.Done()
		lt.run(lagCtx, r.svc.cfg.LagInterval)
	}()
	return lt, func() { cancel(); wg.Wait() }
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

// startOutputs starts the drainer: what earlier primaries committed is
// published first, then what this one commits (drain.go).
func (r *replica) startOutputs(ctx context.Context, sdb *shardDB, sh *primaryShard) (*primaryOutputs, error) {
	ob, err := loadOutboxState(sdb.db, sdb.ro)
	if err != nil {
		return nil, err
	}
	pending, err := pendingOutputs(sdb.db, sdb.ro, ob.published, ob.epoch)
	if err != nil {
		return nil, err
	}
	o := &primaryOutputs{
		pub:       &txnPublisher{sh: sh, topics: &topicCache{lookup: r.svc.cfg.Topics}, st: ob},
		drain:     newDrainer(sh.spec.ID, ob.epoch, r.svc.cfg.Opener, ob.published, r.svc.clock),
		published: ob.published,
	}
	drainCtx, cancel := context.WithCancel(ctx)
	o.cancel = cancel
	go o.drain.run(drainCtx, pending) // owned here: ended by stop
	if len(pending) > 0 {
		r.logger.Info("publishing outputs committed by an earlier primary", "transactions", len(pending),
			"from_txn", pending[0].txn, "to_txn", pending[len(pending)-1].txn)
	}
	return o, nil
}

// stop ends the drainer and waits for it.
func (o *primaryOutputs) stop() {
	o.cancel()
	<-o.drain.done
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

// lagTracker keeps a primary's per-source lag: the channel's last id minus
// the committed offset.
type lagTracker struct {
	r         *replica
	sources   []*source
	mu        sync.Mutex
	committed map[string]message.MessageID
	last      map[string]message.MessageID
}

func (l *lagTracker) commit(offsets map[string]message.MessageID) {
	l.mu.Lock()
	for k, v := range offsets {
		l.committed[k] = v
	}
	l.mu.Unlock()
	l.publish()
}

func (l *lagTracker) refresh(ctx context.Context) {
	last := make(map[string]message.MessageID, len(l.sources))
	for _, s := range l.sources {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		id, err := s.log.LastID(cctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				l.r.logger.Debug("source last id", "channel", s.channel, "error", err)
			}
			continue
		}
		last[s.channel] = id
	}
	l.mu.Lock()
	if l.last == nil {
		l.last = make(map[string]message.MessageID)
	}
	for k, v := range last {
		l.last[k] = v
	}
	l.mu.Unlock()
	l.publish()
}

func (l *lagTracker) publish() {
	l.mu.Lock()
	lag := make(map[string]int64, len(l.sources))
	offsets := make(map[string]message.MessageID, len(l.sources))
	for _, s := range l.sources {
		n := int64(l.last[s.channel]) - int64(l.committed[s.channel])
		if n < 0 {
			n = 0
		}
		lag[s.channel] = n
		offsets[s.channel] = l.committed[s.channel]
	}
	l.mu.Unlock()
	for ch, n := range lag {
		metricSourceLag.WithLabelValues(l.r.id, ch).Set(float64(n))
	}
	l.r.mu.Lock()
	l.r.lag = lag
	l.r.offsets = offsets
	l.r.mu.Unlock()
}

func (l *lagTracker) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.refresh(ctx)
		}
	}
}
