package shard

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/topic"
)

// Dropping pending outputs. A committed output the output stream refuses
// for good (a message over a limit lowered after it was staged, a topic
// deleted) stays in the outbox: every primary meets the same refusal.
// 'consumerd shards outputs --drop TXN[:INDEX] --yes' writes an OutputDrop
// into the shard's spec, with a term above every term so far, and
// unassigns the replicas; the next primary applies the drops whose term is
// above the one its state recorded — it rewrites the transaction's outbox
// rows without the dropped outputs and records the term, in one commit of
// the recovery log (so standbys and snapshots hold it and it survives
// failover) — before it publishes anything. A drop is then inert.
//
// An output is named by its transaction's txn and its index among the
// transaction's outputs in staging order (what 'shards outputs' lists).
// A dropped output is never published; outputs of the same transaction to
// other partitions, and the others of its partition, are published as
// before. (A transaction with more outputs to one partition than a batch
// holds, whose first batches were published before the drop, may have
// outputs after the dropped one published twice: its batches are cut
// anew.)

// outboxDropTermKey records the term of the last output drop applied.
var outboxDropTermKey = []byte("\x00consumerd/outbox-drop-term")

// OutputDrop drops committed outputs of a shard that were not published.
type OutputDrop struct {
	// Txn is the transaction's outbox number.
	Txn uint64 `json:"txn"`
	// Index is the output's index among the transaction's outputs, in
	// staging order; nil: every output of the transaction.
	Index *int `json:"index,omitempty"`
	// Term is above every term given out when the drop was written.
	Term int64 `json:"term"`
}

// String is TXN or TXN:INDEX.
func (d OutputDrop) String() string {
	if d.Index == nil {
		return strconv.FormatUint(d.Txn, 10)
	}
	return fmt.Sprintf("%d:%d", d.Txn, *d.Index)
}

// ParseOutputRef reads TXN or TXN:INDEX (index nil: the whole transaction).
func ParseOutputRef(s string) (txn uint64, index *int, err error) {
	t, i, hasIndex := strings.Cut(s, ":")
	txn, err = strconv.ParseUint(t, 10, 64)
	if err != nil || txn == 0 {
		return 0, nil, fmt.Errorf("%q: want TXN or TXN:INDEX, TXN a transaction number from 1", s)
	}
	if !hasIndex {
		return txn, nil, nil
	}
	n, err := strconv.Atoi(i)
	if err != nil || n < 0 {
		return 0, nil, fmt.Errorf("%q: want TXN:INDEX, INDEX an output's index from 0", s)
	}
	return txn, &n, nil
}

func (s *Spec) validateOutputDrops(bad func(field, format string, args ...any) error) error {
	for i, d := range s.OutputDrops {
		field := fmt.Sprintf("output_drops[%d]", i)
		switch {
		case d.Txn == 0:
			return bad(field+".txn", "must be positive")
		case d.Index != nil && *d.Index < 0:
			return bad(field+".index", "must not be negative, got %d", *d.Index)
		case d.Term <= 0:
			return bad(field+".term", "must be positive, got %d", d.Term)
		}
	}
	return nil
}

// PendingOutput is a committed output not published yet.
type PendingOutput struct {
	Txn       uint64 `json:"txn"`
	Index     int    `json:"index"`
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	// Bytes are the key's, the payload's and the properties' bytes.
	Bytes int    `json:"bytes"`
	Key   string `json:"key"`
}

// Ref is TXN:INDEX, as --drop takes it.
func (p PendingOutput) Ref() string { return fmt.Sprintf("%d:%d", p.Txn, p.Index) }

// OutboxReport is what a shard's database holds of its outbox.
type OutboxReport struct {
	// Published: every transaction up to this one is published.
	Published uint64
	// DropTerm is the term of the last output drop applied (0: none).
	DropTerm int64
	// Pending are the outputs committed after Published, in txn and
	// staging order.
	Pending []PendingOutput
}

// ReadOutbox reads a shard's outbox from its database (as 'consumerd
// shards recover' builds it).
func ReadOutbox(db *grocksdb.DB) (OutboxReport, error) {
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	st, err := loadOutboxState(db, ro)
	if err != nil {
		return OutboxReport{}, err
	}
	term, err := loadUint(db, ro, outboxDropTermKey)
	if err != nil {
		return OutboxReport{}, fmt.Errorf("load outbox: %w", err)
	}
	rep := OutboxReport{Published: st.published, DropTerm: int64(term)}
	err = forEachTxn(db, ro, st.published+1, 0, func(txn uint64, outs []output) error {
		for i, o := range outs {
			name, part, err := topic.ParseChannelName(o.channel)
			if err != nil {
				return fmt.Errorf("txn %d output %d: %w", txn, i, err)
			}
			rep.Pending = append(rep.Pending, PendingOutput{Txn: txn, Index: i, Topic: name, Partition: part,
				Bytes: outputBytes(&o), Key: o.msg.Key})
		}
		return nil
	})
	return rep, err
}

func outputBytes(o *output) int {
	n := len(o.msg.Key) + len(o.msg.Payload)
	for k, v := range o.msg.Properties {
		n += len(k) + len(v)
	}
	return n
}

// forEachTxn calls fn with each transaction's outputs (in staging order)
// whose txn is in from..to (to 0: no bound), in txn order.
func forEachTxn(db *grocksdb.DB, ro *grocksdb.ReadOptions, from, to uint64, fn func(txn uint64, outs []output) error) error {
	it := db.NewIterator(ro)
	defer it.Close()
	var cur uint64
	var outs []output
	for it.Seek(outboxTxnStart(from)); it.ValidForPrefix(outboxPrefix); it.Next() {
		ks, vs := it.Key(), it.Value()
		k, v := append([]byte(nil), ks.Data()...), append([]byte(nil), vs.Data()...) // copies: payloads alias v
		ks.Free()
		vs.Free()
		txn, _, err := parseOutboxKey(k)
		if err != nil {
			return fmt.Errorf("read the outbox: %w", err)
		}
		if to != 0 && txn > to {
			break
		}
		if txn != cur && len(outs) > 0 {
			if err := fn(cur, outs); err != nil {
				return err
			}
			outs = nil
		}
		cur = txn
		row, err := decodeRow(v)
		if err != nil {
			return fmt.Errorf("read the outbox: row %q: %w", k, err)
		}
		outs = append(outs, row...)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read the outbox: %w", err)
	}
	if len(outs) > 0 {
		return fn(cur, outs)
	}
	return nil
}

// applyOutputDrops applies spec's drops newer than the state's (see
// above) in one commit of rec. Called by a primary before it publishes.
func applyOutputDrops(ctx context.Context, rec *recoverylog.Recorder, db *grocksdb.DB, ro *grocksdb.ReadOptions, spec *Spec, log hclog.Logger) error {
	applied, err := loadUint(db, ro, outboxDropTermKey)
	if err != nil {
		return fmt.Errorf("load outbox: %w", err)
	}
	st, err := loadOutboxState(db, ro)
	if err != nil {
		return err
	}
	batch := grocksdb.NewWriteBatch()
	defer batch.Destroy()
	term := applied
	for _, d := range spec.OutputDrops {
		if uint64(d.Term) <= applied {
			continue
		}
		term = max(term, uint64(d.Term))
		if err := dropOutputs(db, ro, batch, st.published, spec.ID, d, log); err != nil {
			return err
		}
	}
	if term == applied {
		return nil
	}
	batch.Put(outboxDropTermKey, strconv.AppendUint(nil, term, 10))
	if err := rec.Commit(ctx, batch).Wait(ctx); err != nil {
		return fmt.Errorf("recording the output drops: %w", err)
	}
	return nil
}

// dropOutputs adds to batch the rewrite of d's transaction without the
// outputs d drops.
func dropOutputs(db *grocksdb.DB, ro *grocksdb.ReadOptions, batch *grocksdb.WriteBatch, published uint64, shardID string, d OutputDrop, log hclog.Logger) error {
	if d.Txn <= published {
		log.Warn("output drop: the transaction's outputs were published already; nothing dropped", "drop", d.String(), "term", d.Term)
		return nil
	}
	var outs []output
	if err := forEachTxn(db, ro, d.Txn, d.Txn, func(_ uint64, o []output) error { outs = o; return nil }); err != nil {
		return err
	}
	if d.Index != nil && *d.Index >= len(outs) {
		log.Warn("output drop: the transaction has no such output; nothing dropped", "drop", d.String(), "outputs", len(outs), "term", d.Term)
		return nil
	}
	batch.DeleteRange(outboxTxnStart(d.Txn), outboxTxnStart(d.Txn+1))
	var row []byte
	rows := 0
	for i, o := range outs {
		if d.Index == nil || i == *d.Index {
			log.Warn("dropping a committed output: it is never published (shards outputs --drop)",
				"txn", d.Txn, "index", i, "channel", o.channel, "bytes", outputBytes(&o), "key", o.msg.Key, "term", d.Term)
			metricOutputsDropped.WithLabelValues(shardID).Inc()
			continue
		}
		if row == nil {
			row = []byte{outboxRowV2}
		}
		row, _ = appendOutput(row, o.channel, &o.msg)
		if len(row) >= outboxRowBytes {
			batch.Put(outboxKey(d.Txn, rows), row)
			rows, row = rows+1, nil
		}
	}
	if row != nil {
		batch.Put(outboxKey(d.Txn, rows), row)
	}
	return nil
}
