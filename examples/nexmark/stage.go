package nexmark

import (
	"fmt"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/windows"
)

// A stage is one app of a query. The stage runner does what every stage
// shares — watermarks (a windows.Tracker), durable timers (windows.Timers),
// and forwarding its watermark as a mark to every partition of its outputs,
// so the next stage, or the checker, knows how far it got — and its logic
// does the rest.
type stage struct {
	name string
	// inputs are the topics it reads; marked those among them fed by another
	// stage (watermarks from marks, not event times).
	inputs, marked []string
	outputs        []string
	// keyedBy is the app's KeyedBy (see shard.App): the input whose
	// partitioning places the stage's state.
	keyedBy string
	logic   func() logic
}

// logic is a stage's own part.
type logic interface {
	// consume applies one data message of the open transaction and returns
	// its event time (used for the watermark of timed inputs).
	consume(c *stageCtx, env topic.Envelope) (ts int64, err error)
	// fire handles a timer the watermark passed, in (at, key) order, in
	// Flush: every message of the transaction was consumed before.
	fire(c *stageCtx, at int64, key []byte) error
}

// fireGrouper is optionally implemented by a logic whose timers of one time
// make one result together (a window's candidates): afterFire is called after
// the transaction's due timers fired, so it can finish the last group.
type fireGrouper interface {
	afterFire(c *stageCtx) error
}

// txnFlusher is optionally implemented by a logic that keeps state changed
// by many messages of a transaction in memory and writes it once:
// flushTxn is called at the start of every Flush, before timers fire.
type txnFlusher interface {
	flushTxn(c *stageCtx) error
}

// stageCtx is what a logic works with; one per primary.
type stageCtx struct {
	s      shard.Shard
	pub    shard.Publisher
	timers *windows.Timers
	// wm is the watermark as of Flush (fire sees the one that made the timer due).
	wm int64
	// ev and buf are scratch space for decoding and encoding.
	ev  Event
	buf []byte
}

func (c *stageCtx) txn() *grocksdb.WriteBatch { return c.s.Transaction() }

// Prefixes of a stage's keys in its database: the runner's, then the logic's.
var (
	trackerPrefix = []byte("w/")
	timersPrefix  = []byte("t/")
)

// stages are every stage made by app, by app name (CommittedWatermark).
var stages = map[string]stage{}

func (st stage) app() shard.App {
	stages[st.name] = st
	return shard.App{
		Name:        st.name,
		Topics:      st.inputs,
		Outputs:     st.outputs,
		KeyedBy:     st.keyedBy,
		NewConsumer: func() shard.Consumer { return &runner{st: st, logic: st.logic()} },
	}
}

// runner is a stage's shard.Consumer.
type runner struct {
	st      stage
	logic   logic
	tracker *windows.Tracker
	c       stageCtx
	// sent is the last watermark broadcast (MinTime: none yet this term; a
	// mark sent twice is harmless, a receiver keeps the max).
	sent    int64
	senders int
}

var (
	_ shard.ShardIniter = (*runner)(nil)
	_ shard.Consumer    = (*runner)(nil)
)

// watermarkDelay is how far behind the largest event time seen on a timed
// input its watermark stays, as in the reference runner (events are in order
// per partition, so none is late; the delay matches its semantics).
const watermarkDelay = 4000

func (r *runner) InitShard(s shard.Shard) error {
	r.tracker = windows.NewTracker(trackerPrefix, watermarkDelay, r.st.marked...)
	if err := r.tracker.Load(s); err != nil {
		return fmt.Errorf("%s: %w", r.st.name, err)
	}
	r.c = stageCtx{s: s, timers: windows.NewTimers(timersPrefix), wm: windows.MinTime}
	if err := r.c.timers.Load(s.Database(), s.ReadOptions()); err != nil {
		return fmt.Errorf("%s: %w", r.st.name, err)
	}
	r.sent = windows.MinTime
	return nil
}

func (r *runner) Consume(s shard.Shard, env topic.Envelope, pub shard.Publisher) error {
	m, ok, err := windows.MarkOf(env.Message)
	if err != nil {
		return fmt.Errorf("%s: message %d of %s: %w", r.st.name, env.Message.ID, env.Partition, err)
	}
	if ok {
		return r.tracker.ObserveMark(env.Partition, m)
	}
	r.c.pub = pub
	ts, err := r.logic.consume(&r.c, env)
	if err != nil {
		return fmt.Errorf("%s: message %d of %s: %w", r.st.name, env.Message.ID, env.Partition, err)
	}
	r.tracker.Observe(env.Partition, ts)
	return nil
}

func (r *runner) Flush(s shard.Shard, pub shard.Publisher) error {
	r.c.pub = pub
	if f, ok := r.logic.(txnFlusher); ok {
		if err := f.flushTxn(&r.c); err != nil {
			return fmt.Errorf("%s: %w", r.st.name, err)
		}
	}
	wm := r.tracker.Current()
	r.c.wm = wm
	if wm > windows.MinTime {
		if err := r.c.timers.Due(s.Transaction(), wm, func(at int64, key []byte) error {
			return r.logic.fire(&r.c, at, key)
		}); err != nil {
			return fmt.Errorf("%s: %w", r.st.name, err)
		}
		if g, ok := r.logic.(fireGrouper); ok {
			if err := g.afterFire(&r.c); err != nil {
				return fmt.Errorf("%s: %w", r.st.name, err)
			}
		}
	}
	if wm > r.sent && len(r.st.outputs) > 0 {
		if r.senders == 0 {
			n, err := pub.Partitions(r.st.inputs[0])
			if err != nil {
				return fmt.Errorf("%s: %w", r.st.name, err)
			}
			r.senders = n
		}
		part := s.Partition()
		if part < 0 || part >= r.senders {
			return fmt.Errorf("%s: shard %s reads partition %d, not one of %s's %d: a stage's shard must read partition i of each input (shards create)",
				r.st.name, s.ID(), part, r.st.inputs[0], r.senders)
		}
		for _, out := range r.st.outputs {
			if err := windows.Broadcast(pub, out, windows.Mark{Sender: part, Senders: r.senders, Time: wm}); err != nil {
				return fmt.Errorf("%s: %w", r.st.name, err)
			}
		}
		r.sent = wm
	}
	r.tracker.Flush(s.Transaction())
	return nil
}

// CommittedWatermark is the watermark a stage's shard has committed, read
// from a (read-only) primary's Database: MaxTime once the shard committed its
// end of input, and with it the end marks it sent to its outputs. A tool
// uses it to learn that a query's final stage is done without reading the
// output.
func CommittedWatermark(sh shard.Shard) (int64, error) {
	st, ok := stages[sh.Spec().App]
	if !ok {
		return 0, fmt.Errorf("shard %s: app %q is not a nexmark stage", sh.ID(), sh.Spec().App)
	}
	t := windows.NewTracker(trackerPrefix, watermarkDelay, st.marked...)
	if err := t.Load(sh); err != nil {
		return 0, fmt.Errorf("shard %s: %w", sh.ID(), err)
	}
	return t.Current(), nil
}
