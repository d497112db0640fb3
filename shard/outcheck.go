package shard

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// What a drainer checks of a chain when it opens it (checkChain, pure):
//
//   - A marker of a live epoch (one new transactions go on) for a txn beyond
//     the shard's own last committed txn means the recovery log lost
//     transactions whose outputs were published: new transactions would be
//     numbered like them and taken for published. The shard fails
//     (ErrOutputsAhead) until an operator restores the log or accepts the
//     loss with 'shards reset', which starts a new epoch (outboxepoch.go).
//     The publisher checks a partition before it first stages to it, so no
//     such transaction is committed.
//   - A chain is bound to the output channel's incarnation (its name ends
//     with a hash of it): a stream deleted and created again, whose ids start
//     over, has other chains, so a writer holding an expected marker id of
//     the old stream (a zombie) never matches a marker of the new one.
//   - The shard records, per output partition, its chain's last marker
//     (epoch, incarnation, id: chanRecord): the chain as the primary found
//     it, with the first transaction that stages to the partition, and its
//     last marker with outbox-published.
//     A chain whose recorded markers are gone (the stream re-created, purged
//     or trimmed by its limits) is reported — an ERROR log and
//     consumerd_shard_output_markers_lost_total — since the outputs pending
//     for it are then published again without a marker to say which were
//     out (at least once, not exactly once).

// ErrOutputsAhead is wrapped by the error of a shard whose output chain
// covers transactions beyond its own last one.
var ErrOutputsAhead = errors.New("an output chain covers transactions beyond the shard's own last one")

var outboxMarkPrefix = []byte("\x00consumerd/outbox-mark/")

// chanRecord is what the shard recorded of its chain on an output
// partition: the chain's epoch and channel incarnation, and its last
// marker's id (epoch "": nothing recorded).
type chanRecord struct {
	epoch, inc string
	id         message.MessageID
}

func putChanRecord(batch *grocksdb.WriteBatch, channel string, r chanRecord) {
	batch.Put(append(append([]byte(nil), outboxMarkPrefix...), channel...), fmt.Appendf(nil, "%s %d %s", r.epoch, r.id, r.inc))
}

// loadChanRecords reads the shard's chanRecords, by channel.
func loadChanRecords(db *grocksdb.DB, ro *grocksdb.ReadOptions) (map[string]chanRecord, error) {
	it := db.NewIterator(ro)
	defer it.Close()
	out := map[string]chanRecord{}
	for it.Seek(outboxMarkPrefix); it.ValidForPrefix(outboxMarkPrefix); it.Next() {
		k, v := it.Key(), it.Value()
		ch := strings.TrimPrefix(string(k.Data()), string(outboxMarkPrefix))
		val := string(v.Data())
		k.Free()
		v.Free()
		parts := strings.SplitN(val, " ", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("output record of %s: %q: want <epoch> <marker id> <incarnation>", ch, val)
		}
		id, err := strconv.ParseUint(parts[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("output record of %s: %q: %w", ch, val, err)
		}
		out[ch] = chanRecord{epoch: parts[0], id: message.MessageID(id), inc: parts[2]}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("load output records: %w", err)
	}
	return out, nil
}

// chainName is the shard's chain of epoch on a channel of incarnation inc
// ("": the backend tells no incarnations, or a chain of an earlier
// release).
func chainName(shard, epoch, inc string) string {
	if inc == "" {
		return shard + "." + epoch
	}
	h := fnv.New64a()
	h.Write([]byte(inc))
	return fmt.Sprintf("%s.%s.%016x", shard, epoch, h.Sum64())
}

// chainFound is what a drainer found when it opened a chain.
type chainFound struct {
	shard, channel, epoch string
	retired               bool   // no new transaction goes on the epoch
	ownLast               uint64 // the shard's last committed txn as the primary started
	rec                   chanRecord
	inc                   string            // the channel's incarnation now
	marker                message.MessageID // the chain's last marker (0: none)
	txn                   uint64            // its txn
}

// checkChain decides what a drainer does with a chain it opened: go on
// (lost "", nil), go on but report that the markers the shard recorded are
// gone (lost says how), or stop the shard (an error wrapping
// ErrOutputsAhead).
func checkChain(f chainFound) (lost string, err error) {
	if f.marker != 0 && f.txn > f.ownLast && !f.retired {
		return "", &outputsAheadError{f}
	}
	if f.rec.epoch != f.epoch {
		return "", nil
	}
	switch {
	case f.rec.inc != "" && f.inc != "" && f.rec.inc != f.inc:
		had := fmt.Sprintf("the shard's markers up to id %d were in incarnation %s", f.rec.id, f.rec.inc)
		if f.rec.id == 0 {
			had = "the shard staged outputs to it in incarnation " + f.rec.inc
		}
		return fmt.Sprintf("the output stream was re-created: %s, the stream is incarnation %s now", had, f.inc), nil
	case f.marker < f.rec.id:
		return fmt.Sprintf("the chain's markers were removed (a purge, or the stream's limits): the shard recorded marker id %d, the chain's last is %d",
			f.rec.id, f.marker), nil
	}
	return "", nil
}

type outputsAheadError struct{ f chainFound }

func (e *outputsAheadError) Unwrap() error { return ErrOutputsAhead }

func (e *outputsAheadError) Error() string {
	f := e.f
	return fmt.Sprintf("output %s (chain %s): %s: its last marker is for txn %d, the shard's own last transaction with outputs is txn %d. "+
		"The recovery log lost transactions whose outputs were published (a log store restored from an older copy, a stream that lost its tail), "+
		"and new transactions numbered from %d on would be taken for published. The shard stops here: restore the recovery log's data and run "+
		"'consumerd shards unassign --failed --shard %s', or accept the loss with 'consumerd shards reset --shard %s --yes' "+
		"(new transactions then publish on a new marker chain; the lost transactions' outputs stay published, and the sources are re-read "+
		"from the offsets the log kept, so outputs of those inputs may go out again)",
		f.channel, chainName(f.shard, f.epoch, f.inc), ErrOutputsAhead, f.txn, f.ownLast, f.ownLast+1, f.shard, f.shard)
}

var errDrainerClosed = errors.New("the output drainer stopped")

// prepare opens channel's chain of epoch (once), checking it: the
// publisher calls it before it first stages to the channel. rec is what
// the shard should record of the partition with the transaction (write
// false: its record already says so), so that a partition the shard
// stages to is bound to the stream's incarnation from its first
// transaction on, not only once a later commit records its markers.
func (d *drainer) prepare(ctx context.Context, channel, epoch string) (rec chanRecord, write bool, err error) {
	c, err := d.channel(ctx, chanKey{epoch, channel})
	if err != nil {
		return chanRecord{}, false, err
	}
	old, ok := d.records[channel]
	return c.opened, !ok || old.epoch != c.opened.epoch || old.inc != c.opened.inc, nil
}

// channel opens (once) a chain on an output partition, checks it
// (checkChain) and reads its last marker.
func (d *drainer) channel(ctx context.Context, k chanKey) (*outChan, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.chans[k]; ok {
		return c, nil
	}
	if d.closed {
		if d.err != nil { // set before run closed (under mu)
			return nil, fmt.Errorf("publishing outputs: %w", d.err)
		}
		return nil, errDrainerClosed
	}
	w, err := d.opener.Open(ctx, &wal.OpenOption{Channel: k.channel})
	if err != nil {
		return nil, fmt.Errorf("open output %s: %w", k.channel, err)
	}
	c, err := d.openChain(ctx, w, k)
	if err != nil {
		w.Close()
		return nil, err
	}
	d.chans[k] = c
	return c, nil
}

func (d *drainer) openChain(ctx context.Context, w wal.WAL, k chanKey) (*outChan, error) {
	max, atomic := w.BatchLimits()
	if max <= 0 {
		return nil, fmt.Errorf("output %s: the %s WAL has no batches; exactly-once outputs need them", k.channel, w.WALName())
	}
	b, err := w.Bounds(ctx)
	if err != nil {
		return nil, fmt.Errorf("output %s: %w", k.channel, err)
	}
	c := &outChan{w: w, channel: k.channel, epoch: k.epoch, inc: b.Incarnation,
		chain: chainName(d.shard, k.epoch, b.Incarnation), max: max, atomic: atomic}
	if err := d.loadMarker(ctx, c); err != nil {
		return nil, err
	}
	c.opened = chanRecord{epoch: k.epoch, inc: c.inc, id: c.after}
	marker := c.after
	rec, hasRec := d.records[k.channel]
	if c.after == 0 && !hasRec && c.inc != "" {
		// No record: the chain may be of an earlier release, not bound to
		// the incarnation. What it covers is covered; the next batch
		// starts the bound chain.
		legacy := &outChan{w: w, channel: k.channel, chain: chainName(d.shard, k.epoch, "")}
		if err := d.loadMarker(ctx, legacy); err != nil {
			return nil, err
		}
		c.txn, c.chunk, marker = legacy.txn, legacy.chunk, legacy.after
	}
	lost, err := checkChain(chainFound{shard: d.shard, channel: k.channel, epoch: k.epoch, retired: d.retired[k.epoch],
		ownLast: d.ownLast, rec: rec, inc: c.inc, marker: marker, txn: c.txn})
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", d.shard, err)
	}
	if lost != "" {
		d.reportLost(c, lost)
	}
	return c, nil
}

// rebind binds c to the channel's incarnation now; changed says it was
// another (the stream was re-created: reported), and c's chain and last
// marker are then the new incarnation's.
func (d *drainer) rebind(ctx context.Context, c *outChan) (changed bool, err error) {
	b, err := c.w.Bounds(ctx)
	if err != nil {
		return false, fmt.Errorf("output %s: %w", c.channel, err)
	}
	if b.Incarnation == c.inc {
		return false, nil
	}
	d.reportLost(c, fmt.Sprintf("the output stream was re-created while the primary published (incarnation %s, now %s)", c.inc, b.Incarnation))
	c.inc, c.chain = b.Incarnation, chainName(d.shard, c.epoch, b.Incarnation)
	return true, d.loadMarker(ctx, c)
}

// reportLost says, loudly, that markers of c's chain are gone.
func (d *drainer) reportLost(c *outChan, why string) {
	metricOutputMarkersLost.WithLabelValues(d.shard, c.channel).Inc()
	d.logger.Error("output markers lost: outputs pending for this partition are published again without a marker "+
		"to say which were out (at least once); downstream readers may see some twice",
		"channel", c.channel, "chain", c.chain, "why", why)
}

// noteMarks notes the last markers of chains just published to, for the
// next takeMarks; a retired epoch's only where no other is noted.
func (d *drainer) noteMarks(chans []*outChan) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range chans {
		if r, ok := d.marks[c.channel]; ok && d.retired[c.epoch] && r.epoch != c.epoch {
			continue
		}
		d.marks[c.channel] = chanRecord{epoch: c.epoch, inc: c.inc, id: c.after}
	}
}

// takeMarks returns the last markers noted since the last call, by
// channel: the transaction loop records them with outbox-published.
func (d *drainer) takeMarks() map[string]chanRecord {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.marks) == 0 {
		return nil
	}
	m := d.marks
	d.marks = map[string]chanRecord{}
	return m
}
