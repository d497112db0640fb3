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

	"github.com/linxGnu/grocksdb"

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
	shard  string
	chain  string
	opener wal.Opener
	clock  clock

	queue     chan *outTxn
	published atomic.Uint64 // every txn up to this one is out
	done      chan struct{}
	err       error // why run stopped early (a permanent failure), read after done

	chans map[string]*outChan // by channel; drainer goroutine only
}

// outChan is the drainer's view of one output partition.
type outChan struct {
	w      wal.WAL
	max    int
	atomic bool              // batches are all or nothing (else: one by one, with dedupe ids)
	after  message.MessageID // the chain's last marker id
	txn    uint64            // the last marker's txn and chunk
	chunk  int
}

func newDrainer(shard, epoch string, opener wal.Opener, published uint64, clk clock) *drainer {
	d := &drainer{shard: shard, opener: opener, clock: clk,
		queue: make(chan *outTxn, drainQueue), done: make(chan struct{}), chans: map[string]*outChan{}}
	d.published.Store(published)
	if epoch != "" {
		d.chain = shard + "." + epoch
	}
	return d
}

// enqueue hands a committed transaction to the drainer, waiting for room.
func (d *drainer) enqueue(ctx context.Context, t *outTxn) error {
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

// run publishes pending (the outbox rows left by earlier primaries, in
// txn order), then what the loop enqueues, until ctx ends (or the queue is
// closed: then once it is drained). Transactions waiting in the queue are
// published together (up to maxCoalesce): a drainer that fell behind
// catches up with fuller batches, not with a batch per transaction.
func (d *drainer) run(ctx context.Context, pending []*outTxn) {
	defer close(d.done)
	defer func() {
		for _, c := range d.chans {
			c.w.Close()
		}
	}()
	for len(pending) > 0 {
		n := min(len(pending), maxCoalesce)
		if err := d.publish(ctx, pending[:n]); err != nil {
			d.err = err
			return
		}
		pending = pending[n:]
	}
	var published time.Time // when the last group was out
	for {
		var first *outTxn
		select {
		case <-ctx.Done():
			return
		case t, ok := <-d.queue:
			if !ok {
				return
			}
			first = t
		}
		group := d.gather(ctx, first, published)
		if err := d.publish(ctx, group); err != nil {
			d.err = err
			return
		}
		published = d.clock.Now()
	}
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

// publish publishes a group of committed transactions' outputs, in txn
// order; it returns only once they are all out, ctx ended (nil: the next
// primary finishes), or a permanent failure (an error: the shard fails).
func (d *drainer) publish(ctx context.Context, group []*outTxn) error {
	published := d.published.Load()
	var order []string
	by := map[string][]*outTxn{} // per channel, the group's txns with outputs there
	count := 0
	for _, t := range group {
		if t.txn <= published {
			continue // recorded as published by an earlier primary
		}
		if d.chain == "" {
			d.chain = d.shard + "." + t.epoch // the shard's first outputs made the epoch
		}
		for _, o := range t.outputs {
			txns := by[o.channel]
			if len(txns) == 0 {
				order = append(order, o.channel)
			}
			if len(txns) == 0 || txns[len(txns)-1].txn != t.txn {
				by[o.channel] = append(txns, &outTxn{txn: t.txn})
			}
			last := by[o.channel][len(by[o.channel])-1]
			last.outputs = append(last.outputs, o)
			count++
		}
	}
	if len(order) == 0 {
		if n := len(group); n > 0 && group[n-1].txn > published {
			d.published.Store(group[n-1].txn)
		}
		return nil
	}
	// Partitions are independent chains: publish them side by side.
	chans := make([]*outChan, len(order))
	for i, ch := range order {
		c, err := d.channel(ctx, ch)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		chans[i] = c
	}
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for i, ch := range order {
		wg.Add(1)
		go func() { // owned here: joined below, ends with ctx
			defer wg.Done()
			errs[i] = d.publishChannel(ctx, chans[i], by[ch])
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	d.published.Store(group[len(group)-1].txn)
	metricOutputsPublished.WithLabelValues(d.shard).Add(float64(count))
	return nil
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
// chain did not move is an error. Every other error is the adaptor's final
// word (see drainer).
func (d *drainer) appendUnits(ctx context.Context, c *outChan, units []unit) error {
	for {
		for len(units) > 0 && units[0].covered(c.txn, c.chunk) {
			units = units[1:]
		}
		if len(units) == 0 {
			return nil
		}
		var msgs []message.MutableMessage
		for _, u := range units {
			msgs = append(msgs, u.msgs...)
		}
		last := units[len(units)-1]
		after := c.after
		res, err := c.w.AppendBatch(ctx, wal.Batch{Messages: msgs, Chain: d.chain, Marker: last.marker(), After: after})
		if err == nil {
			c.after, c.txn, c.chunk = res.MarkerID, last.txn, last.chunk
			return nil
		}
		if !errors.Is(err, wal.ErrStaleChain) {
			return err
		}
		if err := d.loadMarker(ctx, c); err != nil {
			return err
		}
		if c.after == after {
			return fmt.Errorf("chain %s on %s: the WAL refused a batch after marker %d as stale, but that is still the last marker: %w", d.chain, c.w.Channel(), after, err)
		}
	}
}

// channel opens (once) an output partition and reads its last marker.
func (d *drainer) channel(ctx context.Context, ch string) (*outChan, error) {
	if c, ok := d.chans[ch]; ok {
		return c, nil
	}
	w, err := d.opener.Open(ctx, &wal.OpenOption{Channel: ch})
	if err != nil {
		return nil, fmt.Errorf("open output %s: %w", ch, err)
	}
	max, atomic := w.BatchLimits()
	if max <= 0 {
		w.Close()
		return nil, fmt.Errorf("output %s: the %s WAL has no batches; exactly-once outputs need them", ch, w.WALName())
	}
	c := &outChan{w: w, max: max, atomic: atomic}
	if err := d.loadMarker(ctx, c); err != nil {
		w.Close()
		return nil, err
	}
	d.chans[ch] = c
	return c, nil
}

// loadMarker reads the chain's last marker on c.
func (d *drainer) loadMarker(ctx context.Context, c *outChan) error {
	m, err := c.w.LastMarker(ctx, d.chain)
	if err != nil {
		return err
	}
	c.after, c.txn, c.chunk = m.ID, 0, -1
	if m.ID == 0 {
		return nil
	}
	txn, chunk, err := parseMarker(m.Payload)
	if err != nil {
		return fmt.Errorf("chain %s on %s: %w", d.chain, c.w.Channel(), err)
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

// pendingOutputs reads the outbox rows of transactions after published, in
// txn order: what earlier primaries committed and may not have published.
func pendingOutputs(db *grocksdb.DB, ro *grocksdb.ReadOptions, published uint64, epoch string) ([]*outTxn, error) {
	it := db.NewIterator(ro)
	defer it.Close()
	var out []*outTxn
	for it.Seek(outboxTxnStart(published + 1)); it.ValidForPrefix(outboxPrefix); it.Next() {
		k, v := it.Key(), it.Value()
		txn, _, err := parseOutboxKey(k.Data())
		if err == nil {
			var os []output
			// A copy of the row: its payloads alias it.
			os, err = decodeRow(append([]byte(nil), v.Data()...))
			if err != nil {
				err = fmt.Errorf("row %q: %w", k.Data(), err)
			} else {
				if len(out) == 0 || out[len(out)-1].txn != txn {
					out = append(out, &outTxn{txn: txn, epoch: epoch})
				}
				out[len(out)-1].outputs = append(out[len(out)-1].outputs, os...)
			}
		}
		k.Free()
		v.Free()
		if err != nil {
			return nil, fmt.Errorf("read the outbox: %w", err)
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read the outbox: %w", err)
	}
	if len(out) > 0 && epoch == "" {
		return nil, fmt.Errorf("read the outbox: %d transactions of outputs but no %s", len(out), outboxEpochKey)
	}
	return out, nil
}
