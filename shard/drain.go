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
	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/retry"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
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
// whose reply was lost — already stored it, and it is skipped. Failures of
// the WAL are retried with the one retry policy until the primary stops;
// what is left is published by the next primary, from the outbox rows.
type drainer struct {
	shard  string
	chain  string
	opener wal.Opener
	logger hclog.Logger

	queue     chan *outTxn
	published atomic.Uint64 // every txn up to this one is out
	done      chan struct{}
	err       error // why run stopped early (a permanent failure), read after done

	chans map[string]*outChan // by channel; drainer goroutine only
}

// outChan is the drainer's view of one output partition.
type outChan struct {
	w     wal.WAL
	max   int
	after message.MessageID // the chain's last marker id
	txn   uint64            // the last marker's txn and chunk
	chunk int
}

func newDrainer(shard, epoch string, opener wal.Opener, published uint64, logger hclog.Logger) *drainer {
	d := &drainer{shard: shard, opener: opener, logger: logger,
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
// closed: then once it is drained).
func (d *drainer) run(ctx context.Context, pending []*outTxn) {
	defer close(d.done)
	defer func() {
		for _, c := range d.chans {
			c.w.Close()
		}
	}()
	for _, t := range pending {
		if err := d.publish(ctx, t); err != nil {
			d.err = err
			return
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case t, ok := <-d.queue:
			if !ok {
				return
			}
			if err := d.publish(ctx, t); err != nil {
				d.err = err
				return
			}
		}
	}
}

// publish publishes one transaction's outputs; it returns only once they are
// all out, ctx ended (nil: the next primary finishes), or a permanent
// failure (an error: the shard fails).
func (d *drainer) publish(ctx context.Context, t *outTxn) error {
	if t.txn <= d.published.Load() {
		return nil // recorded as published by an earlier primary
	}
	if d.chain == "" {
		d.chain = d.shard + "." + t.epoch // the shard's first outputs made the epoch
	}
	var order []string
	by := map[string][]message.MutableMessage{}
	for _, o := range t.outputs {
		if _, ok := by[o.channel]; !ok {
			order = append(order, o.channel)
		}
		by[o.channel] = append(by[o.channel], o.msg)
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
			errs[i] = d.publishChannel(ctx, t.txn, chans[i], by[ch])
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
	d.published.Store(t.txn)
	metricOutputsPublished.WithLabelValues(d.shard).Add(float64(len(t.outputs)))
	return nil
}

// publishChannel publishes one transaction's messages for one partition.
// It alone touches c while it runs.
func (d *drainer) publishChannel(ctx context.Context, txn uint64, c *outChan, msgs []message.MutableMessage) error {
	ch := c.w.Channel()
	chunks := (len(msgs) + c.max - 1) / c.max
	for k := 0; k < chunks; k++ {
		if txn < c.txn || (txn == c.txn && k <= c.chunk) {
			continue // already there
		}
		part := msgs[k*c.max : min((k+1)*c.max, len(msgs))]
		marker := fmt.Sprintf("%d:%d:%d", txn, k, chunks)
		err := retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}.Do(ctx, retry.Call{
			Retryable: func(err error) bool { return !errors.Is(err, errPermanentOutput) },
			OnRetry: func(attempt int, wait time.Duration, err error) {
				d.logger.Warn("publishing outputs failed; retrying", "channel", ch, "txn", txn, "attempt", attempt, "backoff", wait, "error", err)
			},
		}, func() error { return d.appendChunk(ctx, c, txn, k, marker, part) })
		if err != nil {
			return fmt.Errorf("publish txn %d's outputs to %s: %w", txn, ch, err)
		}
	}
	return nil
}

// errPermanentOutput marks a failure no retry mends (e.g. a message larger
// than the server accepts).
var errPermanentOutput = errors.New("permanent")

// appendChunk appends one chunk, or finds it already stored.
func (d *drainer) appendChunk(ctx context.Context, c *outChan, txn uint64, k int, marker string, msgs []message.MutableMessage) error {
	res, err := c.w.AppendBatch(ctx, wal.Batch{Messages: msgs, Chain: d.chain, Marker: []byte(marker), After: c.after})
	if err == nil {
		c.after, c.txn, c.chunk = res.MarkerID, txn, k
		return nil
	}
	if !errors.Is(err, wal.ErrStaleChain) {
		if !walimpls.IsRetryable(err) {
			return fmt.Errorf("%w: %w", errPermanentOutput, err)
		}
		return err
	}
	if err := d.loadMarker(ctx, c); err != nil {
		return err
	}
	if txn < c.txn || (txn == c.txn && k <= c.chunk) {
		return nil // another writer (or a lost reply) stored it
	}
	return fmt.Errorf("chain %s moved to txn %d chunk %d; retrying after it", d.chain, c.txn, c.chunk)
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
	max, _ := w.BatchLimits()
	if max <= 0 {
		w.Close()
		return nil, fmt.Errorf("output %s: the %s WAL has no batches; exactly-once outputs need them", ch, w.WALName())
	}
	c := &outChan{w: w, max: max}
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
		return fmt.Errorf("%w: chain %s on %s: %w", errPermanentOutput, d.chain, c.w.Channel(), err)
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
			var o output
			o, err = decodeOutput(v.Data())
			if err == nil {
				if len(out) == 0 || out[len(out)-1].txn != txn {
					out = append(out, &outTxn{txn: txn, epoch: epoch})
				}
				out[len(out)-1].outputs = append(out[len(out)-1].outputs, o)
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
