package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// outTxn is one committed transaction's outputs, in staging order.
type outTxn struct {
	txn     uint64
	epoch   string // the shard's outbox epoch (the chain's suffix)
	outputs []output
}

// drainQueue bounds the committed transactions waiting to be published: a
// primary whose outputs cannot keep up stops consuming.
const drainQueue = 16

// drainer publishes a primary's committed outputs, one transaction at a
// time in txn order: per output partition, the transaction's messages as
// atomic batches (chunks of at most the WAL's batch size), each closed by a
// marker "<txn>:<chunk>:<chunks>" on the shard's chain. A batch expects the
// chain's last marker, so it lands at most once; when the chain moved
// (ErrStaleChain) the drainer reads the last marker: at or past this chunk
// means another writer — a zombie of this shard, or an earlier attempt
// whose reply was lost — already stored it, and it is skipped.
//
// Retries have one owner: the WAL adaptor, which retries a failed append
// or marker read with the one retry policy (internal/retry). The drainer
// retries nothing itself; of a publish's errors it handles only its own
// business: ErrStaleChain (read the last marker, skip what it covers, send
// the rest) and the end of its context (nil: the next primary finishes).
// Any other error stops it with that error, which stops the primary
// (txnLoop), and the replica's rule for failures (transient.go) decides
// what follows: the adaptor's retries ran out (retry.ErrExhausted — a
// NATS outage longer than they wait) is transient, and the replica
// restarts with backoff for as long as the outage lasts, its new primary
// publishing what is left from the outbox rows; anything else (a message
// the server rejects, a marker that does not parse) fails the replica.
type drainer struct {
	drainConfig
	clock clock

	queue     chan *outTxn
	published atomic.Uint64 // every txn up to this one is out
	known     atomic.Uint64 // the last txn committed that the drainer knows of
	gaugeMu   sync.Mutex    // setGauge
	done      chan struct{}
	err       error // why run stopped early (a permanent failure), read after done
	// launch starts run (startLazily); started runs it once, at the first
	// enqueue, or ends the never started drainer in stopRun.
	launch  func()
	started sync.Once

	// Chain workers (drainchains.go): workers, wctx and wcancel belong to
	// the dispatching goroutine; gmu guards inflight.
	workers    map[chanKey]*chainWorker
	wctx       context.Context
	wcancel    context.CancelFunc
	wg         sync.WaitGroup
	stuckAfter time.Duration // chainStuckAfter (tests shorten it)
	gmu        sync.Mutex
	inflight   []*inflightGroup // dispatched, oldest first, not yet settled
	failed     chan struct{}    // closed on a worker's failure, werr then set
	failOnce   sync.Once
	werr       error

	mu     sync.Mutex
	chans  map[chanKey]*outChan  // open output partitions, by epoch and channel
	closed bool                  // run ended: chans closed, none opened
	marks  map[string]chanRecord // last markers not yet taken by takeMarks, by channel
}

// drainConfig is what a drainer is told of its shard.
type drainConfig struct {
	shard  string
	opener wal.Opener
	// ownLast is the shard's last committed txn when the primary started:
	// a marker of a live epoch beyond it covers transactions the shard no
	// longer has (outcheck.go).
	ownLast uint64
	// retired are epochs no new transaction goes on (outboxepoch.go).
	retired map[string]bool
	// records are the shard's records of its output partitions' last
	// markers, by channel (outcheck.go).
	records map[string]chanRecord
	logger  hclog.Logger
	// gauge, when set, is kept at the number of committed transactions
	// not all published yet.
	gauge prometheus.Gauge
}

// chanKey names one chain on one output partition.
type chanKey struct{ epoch, channel string }

// outChan is the drainer's view of one chain on one output partition.
type outChan struct {
	w       wal.WAL
	channel string
	epoch   string
	inc     string // the channel's incarnation the chain is bound to
	chain   string // the chain's name: chainName(shard, epoch, inc)
	max     int
	atomic  bool              // batches are all or nothing (else: one by one, with dedupe ids)
	after   message.MessageID // the chain's last marker id
	txn     uint64            // the last marker's txn and chunk
	chunk   int
	opened  chanRecord // the chain as it was opened (never changes: read by prepare)
}

func newDrainer(cfg drainConfig, published uint64, clk clock) *drainer {
	if cfg.logger == nil {
		cfg.logger = hclog.NewNullLogger()
	}
	d := &drainer{drainConfig: cfg, clock: clk,
		queue: make(chan *outTxn, drainQueue), done: make(chan struct{}),
		chans: map[chanKey]*outChan{}, marks: map[string]chanRecord{},
		workers: map[chanKey]*chainWorker{}, failed: make(chan struct{}), stuckAfter: chainStuckAfter}
	d.published.Store(published)
	d.known.Store(max(published, cfg.ownLast))
	d.setGauge()
	return d
}

// setGauge sets the unpublished transactions gauge.
func (d *drainer) setGauge() {
	if d.gauge == nil {
		return
	}
	// Read and set under one lock: the last Set has the newest values
	// (the loop and the chain workers move them concurrently).
	d.gaugeMu.Lock()
	defer d.gaugeMu.Unlock()
	k, p := d.known.Load(), d.published.Load()
	d.gauge.Set(float64(k - min(k, p)))
}

// startLazily arranges for run(ctx, b) to start at the first enqueue
// (startRun), not now: a primary that commits no output holds no drainer
// goroutine. A backlog is the caller's to start at once (startRun).
// enqueue, startRun and stopRun are the transaction loop's goroutine's.
func (d *drainer) startLazily(ctx context.Context, b backlog) {
	d.launch = func() { go d.run(ctx, b) } // owned by the primary: ended by ctx, waited by stopRun
}

// startRun starts run unless it started already.
func (d *drainer) startRun() {
	d.started.Do(func() {
		if d.launch != nil {
			d.launch()
		}
	})
}

// stopRun waits for run to end, its context done; a drainer whose run
// never started is shut down here instead (chains prepare opened closed).
func (d *drainer) stopRun() {
	d.started.Do(func() {
		d.shutdown()
		close(d.done)
	})
	<-d.done
}

// enqueue hands a committed transaction to the drainer, waiting for room.
func (d *drainer) enqueue(ctx context.Context, t *outTxn) error {
	d.startRun()
	if t.txn > d.known.Load() {
		d.known.Store(t.txn)
		d.setGauge()
	}
	select {
	case d.queue <- t:
		return nil
	case <-d.done:
		if d.err != nil {
			return fmt.Errorf("publishing outputs: %w", d.err)
		}
		return ctx.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run publishes the backlog (the outbox rows left by earlier primaries, in
// txn order, a page at a time), then what the loop enqueues, until ctx ends
// (or the queue is closed: then once it is drained). Transactions waiting
// in the queue are published together (up to maxCoalesce): a drainer that
// fell behind catches up with fuller batches, not with a batch per
// transaction.
func (d *drainer) run(ctx context.Context, b backlog) {
	defer close(d.done)
	defer d.shutdown()
	for ctx.Err() == nil {
		pending, err := b.page()
		if err != nil {
			d.err = err
			return
		}
		if len(pending) == 0 {
			break
		}
		for len(pending) > 0 {
			n := min(len(pending), maxCoalesce)
			if d.err = d.step(ctx, pending[:n]); d.err != nil {
				return
			}
			pending = pending[n:]
		}
	}
	var published time.Time // when the last group was out
	for {
		var first *outTxn
		select {
		case <-ctx.Done():
			return
		case <-d.failed:
			d.err = d.werr
			return
		case t, ok := <-d.queue:
			if !ok {
				d.err = d.awaitAll(ctx)
				return
			}
			first = t
		}
		group := d.gather(ctx, first, published)
		if d.err = d.step(ctx, group); d.err != nil {
			return
		}
		published = d.clock.Now()
	}
}

// step dispatches a group and waits for it, at most chainStuckAfter.
func (d *drainer) step(ctx context.Context, group []*outTxn) error {
	g, err := d.dispatch(ctx, group)
	if err != nil || g == nil {
		return err
	}
	return d.await(ctx, g, d.stuckAfter)
}

// gather returns first and what joins it, as coalescing decides; published
// is when the last group was out.
func (d *drainer) gather(ctx context.Context, first *outTxn, published time.Time) []*outTxn {
	group := []*outTxn{first}
	c := startCoalescing(d.clock, published, len(first.outputs))
	defer c.stop()
	for {
		var t *outTxn
		ok := true
		switch c.next() {
		case coalescePublish:
			return group
		case coalesceTake:
			select {
			case t, ok = <-d.queue:
			default:
				c.emptyQueue()
				continue
			}
		case coalesceLinger:
			select {
			case t, ok = <-d.queue:
			case <-c.lingerC():
				c.woke()
				continue
			case <-ctx.Done():
				return group
			}
		}
		if !ok {
			return group // the queue closed
		}
		group = append(group, t)
		c.took(len(t.outputs))
	}
}

// unit is one transaction's messages for one partition, or a chunk of them
// when they exceed a batch: the drainer's grain of "already there".
type unit struct {
	txn           uint64
	chunk, chunks int
	msgs          []message.MutableMessage
}

func (u unit) marker() []byte { return fmt.Appendf(nil, "%d:%d:%d", u.txn, u.chunk, u.chunks) }

// covered reports whether the chain's last marker (txn, chunk) covers u.
func (u unit) covered(txn uint64, chunk int) bool {
	return u.txn < txn || (u.txn == txn && u.chunk <= chunk)
}

// split groups a group's outputs by chain, skipping txns published
// before: the chains in order of first use, each one's txns with their
// outputs there, and the number of messages.
func (d *drainer) split(group []*outTxn) (order []chanKey, by map[chanKey][]*outTxn, count int) {
	published := d.published.Load()
	by = map[chanKey][]*outTxn{}
	for _, t := range group {
		if t.txn <= published {
			continue // recorded as published by an earlier primary
		}
		for _, o := range t.outputs {
			k := chanKey{t.epoch, o.channel}
			txns := by[k]
			if len(txns) == 0 {
				order = append(order, k)
			}
			if len(txns) == 0 || txns[len(txns)-1].txn != t.txn {
				by[k] = append(txns, &outTxn{txn: t.txn})
			}
			last := by[k][len(by[k])-1]
			last.outputs = append(last.outputs, o)
			count++
		}
	}
	return order, by, count
}

// markPublished records that every txn up to txn is out (under gmu).
func (d *drainer) markPublished(txn uint64) {
	if txn > d.published.Load() {
		d.published.Store(txn)
	}
	d.setGauge()
}

// publishChannel publishes txns' messages for one partition, in txn order:
// each transaction's messages cut into chunks of at most a batch, chunks
// packed into batches of at most c.max messages, each batch closed by its
// last chunk's marker. It alone touches c while it runs.
func (d *drainer) publishChannel(ctx context.Context, c *outChan, txns []*outTxn) error {
	var units []unit
	for _, t := range txns {
		msgs := make([]message.MutableMessage, len(t.outputs))
		for i, o := range t.outputs {
			msgs[i] = o.msg
		}
		chunks := (len(msgs) + c.max - 1) / c.max
		for k := 0; k < chunks; k++ {
			units = append(units, unit{txn: t.txn, chunk: k, chunks: chunks, msgs: msgs[k*c.max : min((k+1)*c.max, len(msgs))]})
		}
	}
	ch := c.w.Channel()
	for len(units) > 0 {
		// Without atomic batches a batch's dedupe ids derive from its
		// marker, so a batch must be the same whoever re-sends it (a later
		// primary groups differently): one unit per batch.
		n, size := 0, 0
		for n < len(units) && size+len(units[n].msgs) <= c.max && (c.atomic || n == 0) {
			size += len(units[n].msgs)
			n++
		}
		batch := units[:n]
		if err := d.appendUnits(ctx, c, batch); err != nil {
			return &publishError{shard: d.shard, channel: ch, from: batch[0].txn, to: batch[len(batch)-1].txn, err: err}
		}
		units = units[n:]
	}
	return nil
}

// appendUnits appends the units the chain's last marker does not cover as
// one batch, closed by the last unit's marker, or finds them all stored.
// When the chain moved (another writer, or an attempt of the adaptor's
// whose reply was lost) it reads the last marker, drops what it covers, and
// sends the rest: the chain moving is another writer's progress, not a
// failure, so there is no bound but that progress — a stale reply whose
// chain did not move is an error. A chain that went backwards lost its
// markers under the drainer (the stream purged or re-created): reported,
// and the chain bound again to the channel's incarnation now
// (outcheck.go). Every other error is the adaptor's final word (see
// drainer).
func (d *drainer) appendUnits(ctx context.Context, c *outChan, units []unit) error {
	for {
		for len(units) > 0 && units[0].covered(c.txn, c.chunk) {
			units = units[1:]
		}
		if len(units) == 0 {
			return nil
		}
		if c.after == 0 {
			// A chain with no marker yet matches any writer that expects
			// none: bind it to the channel's incarnation now, so a stream
			// re-created since the channel was opened is not written to
			// on the old one's chain.
			prevTxn, prevChunk := c.txn, c.chunk
			changed, err := d.rebind(ctx, c)
			if err != nil {
				return err
			}
			if changed {
				if err := d.wentBack(c, prevTxn, prevChunk); err != nil {
					return err
				}
				continue
			}
		}
		var msgs []message.MutableMessage
		for _, u := range units {
			msgs = append(msgs, u.msgs...)
		}
		last := units[len(units)-1]
		after := c.after
		res, err := c.w.AppendBatch(ctx, wal.Batch{Messages: msgs, Chain: c.chain, Marker: last.marker(), After: after})
		if err == nil {
			c.after, c.txn, c.chunk = res.MarkerID, last.txn, last.chunk
			return nil
		}
		if !errors.Is(err, wal.ErrStaleChain) {
			return err
		}
		prevTxn, prevChunk := c.txn, c.chunk
		if err := d.loadMarker(ctx, c); err != nil {
			return err
		}
		if c.after < after {
			d.reportLost(c, fmt.Sprintf("the chain's last marker went from id %d to %d while the primary published", after, c.after))
			if _, err := d.rebind(ctx, c); err != nil {
				return err
			}
		}
		if err := d.wentBack(c, prevTxn, prevChunk); err != nil {
			return err
		}
		if c.after == after {
			return fmt.Errorf("chain %s on %s: the WAL refused a batch after marker %d as stale, but that is still the last marker: %w", c.chain, c.channel, after, err)
		}
	}
}

// errChainWentBack: a chain covers less than it did (markers removed or the
// stream re-created under the drainer).
var errChainWentBack = errors.New("the output chain went backwards")

// wentBack fails when c's chain now covers less than (txn, chunk), which it
// covered before: the drainer holds only the transactions after that, and
// those in between are not its to send. The primary restarts (transient);
// its successor opens the chain afresh and publishes from the outbox.
func (d *drainer) wentBack(c *outChan, txn uint64, chunk int) error {
	if c.txn > txn || c.txn == txn && c.chunk >= chunk {
		return nil
	}
	return markTransient(fmt.Errorf("chain %s on %s: %w: it covered txn %d chunk %d, now txn %d chunk %d (the stream purged or re-created); restarting to publish from the outbox",
		c.chain, c.channel, errChainWentBack, txn, chunk, c.txn, c.chunk))
}

// loadMarker reads the chain's last marker on c.
func (d *drainer) loadMarker(ctx context.Context, c *outChan) error {
	m, err := c.w.LastMarker(ctx, c.chain)
	if err != nil {
		return err
	}
	c.after, c.txn, c.chunk = m.ID, 0, -1
	if m.ID == 0 {
		return nil
	}
	txn, chunk, err := parseMarker(m.Payload)
	if err != nil {
		return fmt.Errorf("chain %s on %s: %w", c.chain, c.channel, err)
	}
	c.txn, c.chunk = txn, chunk
	return nil
}

func parseMarker(b []byte) (txn uint64, chunk int, err error) {
	parts := strings.Split(string(b), ":")
	if len(parts) != 3 {
		return 0, 0, fmt.Errorf("marker %q: want <txn>:<chunk>:<chunks>", b)
	}
	if txn, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("marker %q: %w", b, err)
	}
	if chunk, err = strconv.Atoi(parts[1]); err != nil {
		return 0, 0, fmt.Errorf("marker %q: %w", b, err)
	}
	return txn, chunk, nil
}
