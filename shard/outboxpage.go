package shard

import (
	"fmt"

	"github.com/linxGnu/grocksdb"
)

// backlog yields, a page at a time, the committed outputs a new primary
// publishes before its own: a long output outage with many failovers
// leaves a backlog that need not fit in memory.
type backlog interface {
	// page returns the next transactions, in txn order (none: the end).
	page() ([]*outTxn, error)
}

// Pages of the outbox hold whole transactions, at least one, and stop after
// the one that reaches backlogPageBytes of rows or backlogPageTxns.
const (
	backlogPageBytes = 8 << 20
	backlogPageTxns  = 4 * maxCoalesce
)

// outboxBacklog pages through the outbox rows of txns next..last.
type outboxBacklog struct {
	db   *grocksdb.DB
	ro   *grocksdb.ReadOptions
	st   *outboxState // epochOf
	next uint64       // the first txn not paged yet
	last uint64       // the last txn of the backlog (the shard's when the primary started)
	// a page's bounds: backlogPageBytes and backlogPageTxns
	pageBytes, pageTxns int
}

func newOutboxBacklog(db *grocksdb.DB, ro *grocksdb.ReadOptions, st *outboxState) *outboxBacklog {
	return &outboxBacklog{db: db, ro: ro, st: st, next: st.published + 1, last: st.last,
		pageBytes: backlogPageBytes, pageTxns: backlogPageTxns}
}

func (b *outboxBacklog) page() ([]*outTxn, error) {
	if b.next > b.last {
		return nil, nil
	}
	it := b.db.NewIterator(b.ro)
	defer it.Close()
	var out []*outTxn
	size := 0
	for it.Seek(outboxTxnStart(b.next)); it.ValidForPrefix(outboxPrefix); it.Next() {
		k, v := it.Key(), it.Value()
		txn, _, err := parseOutboxKey(k.Data())
		full := len(out) >= b.pageTxns || size >= b.pageBytes
		if err == nil && (txn > b.last || full && out[len(out)-1].txn != txn) {
			k.Free()
			v.Free()
			break
		}
		if err == nil {
			var os []output
			// A copy of the row: its payloads alias it.
			os, err = decodeRow(append([]byte(nil), v.Data()...))
			if err != nil {
				err = fmt.Errorf("row %q: %w", k.Data(), err)
			} else {
				if len(out) == 0 || out[len(out)-1].txn != txn {
					out = append(out, &outTxn{txn: txn, epoch: b.st.epochOf(txn)})
				}
				out[len(out)-1].outputs = append(out[len(out)-1].outputs, os...)
				size += v.Size()
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
	if len(out) == 0 {
		b.next = b.last + 1
		return nil, nil
	}
	if out[0].epoch == "" {
		return nil, fmt.Errorf("read the outbox: transactions of outputs from txn %d on but no %s", out[0].txn, outboxEpochKey)
	}
	b.next = out[len(out)-1].txn + 1
	return out, nil
}

// listBacklog is a backlog of one page, given.
type listBacklog []*outTxn

func (l *listBacklog) page() ([]*outTxn, error) {
	p := *l
	*l = nil
	return p, nil
}
