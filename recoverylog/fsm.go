package recoverylog

import (
	"github.com/consumerd/consumerd/wal/message"
)

// Decision is what the chain FSM says to do with a record.
type Decision int

const (
	// Apply: the record extends the chain (for a chunked Txn: its last chunk
	// completed it); apply it and persist the new Position with it.
	Apply Decision = iota + 1
	// Skip: the record does not count (duplicate, zombie branch, fenced term,
	// or a stray chunk). Nothing changes.
	Skip
	// Accumulate: the record is a chunk of a Txn not complete yet; it counts
	// only once its last chunk is read.
	Accumulate
)

// String names the decision.
func (d Decision) String() string {
	switch d {
	case Apply:
		return "apply"
	case Skip:
		return "skip"
	case Accumulate:
		return "accumulate"
	default:
		return "decision(?)"
	}
}

// SkipReason says why a record was skipped: the type of the exported
// Step.Reason, so it and all its values stay exported with Step. The values
// are also the "reason" label of consumerd_recoverylog_skipped_records_total.
type SkipReason string

const (
	// SkipDuplicate: the record's seq is at or below the chain's (a copy
	// stored twice by a retried append, or a stale record).
	SkipDuplicate SkipReason = "duplicate"
	// SkipBranch: the record does not extend the chain (a zombie writer's
	// branch, or a record after a gap).
	SkipBranch SkipReason = "branch"
	// SkipFenced: the record was authored under a term below the chain's
	// current fence term.
	SkipFenced SkipReason = "fenced"
	// SkipChunk: a chunk out of order, or a record other than the expected
	// next chunk extending a partially read chunked Txn.
	SkipChunk SkipReason = "chunk"
)

// Step is the FSM's verdict on one record.
type Step struct {
	Decision Decision
	// Reason is set for Skip.
	Reason SkipReason
	// Kind is the applied record's kind (Apply only).
	Kind Kind
	// Data is the whole WriteBatch of an applied Txn (assembled from its
	// chunks if it was chunked). It may alias the records' bytes.
	Data []byte
	// Record is the record that completed the Apply (for a chunked Txn, its
	// last chunk).
	Record *Record
	// Position is the committed position after this step.
	Position Position
	// Discarded is the number of chunks of an incomplete Txn dropped because
	// this record extended the committed chain instead (its writer was
	// superseded mid-transaction; those chunks were never acknowledged as a
	// whole).
	Discarded int
}

// FSM tracks the recovery-log chain. It is pure (no I/O) and not safe for
// concurrent use.
//
// Rules, in order, for a record r read at log id id:
//  1. r.Term below the current fence term (Position.Term) → Skip(fenced).
//  2. A chunked Txn is in progress and r extends its pending chain: if r is
//     its next chunk (same Parts and Term), Accumulate, or Apply when r is
//     the last chunk; otherwise Skip(chunk).
//  3. r extends the committed chain (r.Seq == Seq+1, r.PrevChecksum ==
//     Checksum): any in-progress chunked Txn is discarded; then a Txn of one
//     part, a Fence, or a Snapshot → Apply; a first chunk → Accumulate; a
//     later chunk → Skip(chunk). An applied Fence raises Position.Term to r.Term.
//  4. Otherwise Skip(duplicate) when r.Seq ≤ Seq, else Skip(branch).
//
// So readers apply only records that extend the chain: a zombie writer's
// branch is ignored even on a backend without conditional appends.
type FSM struct {
	pos     Position
	pending *pendingTxn
}

type pendingTxn struct {
	pos   Position // chain state after the last accumulated chunk
	first uint32   // chain checksum after the first chunk (spots its duplicates)
	term  uint64
	parts uint32
	data  [][]byte
	size  int
}

// NewFSM starts the chain at pos (the Position persisted in the DB).
func NewFSM(pos Position) *FSM { return &FSM{pos: pos} }

// Position is the committed chain position.
func (f *FSM) Position() Position { return f.pos }

// Pending reports whether a chunked Txn is partially read.
func (f *FSM) Pending() bool { return f.pending != nil }

func extends(p Position, r *Record) bool {
	return r.Seq == p.Seq+1 && r.PrevChecksum == p.Checksum
}

// Step decides what to do with record r read at log id id, and advances the
// FSM accordingly.
func (f *FSM) Step(r *Record, id message.MessageID) Step {
	if r.Term < f.pos.Term {
		return Step{Decision: Skip, Reason: SkipFenced, Position: f.pos}
	}
	if pt := f.pending; pt != nil && extends(pt.pos, r) {
		if r.Kind != KindTxn || r.Parts != pt.parts || r.Term != pt.term || int(r.Part) != len(pt.data) {
			return Step{Decision: Skip, Reason: SkipChunk, Position: f.pos}
		}
		pt.data = append(pt.data, r.Data)
		pt.size += len(r.Data)
		pt.pos.Seq = r.Seq
		pt.pos.Checksum = ChainChecksum(pt.pos.Checksum, r.encoded())
		if r.Part+1 < r.Parts {
			return Step{Decision: Accumulate, Position: f.pos}
		}
		data := make([]byte, 0, pt.size)
		for _, d := range pt.data {
			data = append(data, d...)
		}
		f.pending = nil
		f.pos = Position{Seq: pt.pos.Seq, Checksum: pt.pos.Checksum, LogID: id, Term: f.pos.Term}
		return Step{Decision: Apply, Kind: KindTxn, Data: data, Record: r, Position: f.pos}
	}
	if !extends(f.pos, r) {
		if r.Seq <= f.pos.Seq {
			return Step{Decision: Skip, Reason: SkipDuplicate, Position: f.pos}
		}
		return Step{Decision: Skip, Reason: SkipBranch, Position: f.pos}
	}
	next := Position{Seq: r.Seq, Checksum: ChainChecksum(f.pos.Checksum, r.encoded()), LogID: id, Term: f.pos.Term}
	if f.pending != nil && f.pending.first == next.Checksum {
		// A second copy of the pending txn's first chunk.
		return Step{Decision: Skip, Reason: SkipDuplicate, Position: f.pos}
	}
	var discarded int
	if f.pending != nil {
		discarded = len(f.pending.data)
		f.pending = nil
	}
	switch r.Kind {
	case KindTxn:
		if r.Parts > 1 {
			if r.Part != 0 {
				return Step{Decision: Skip, Reason: SkipChunk, Position: f.pos, Discarded: discarded}
			}
			f.pending = &pendingTxn{pos: next, first: next.Checksum, term: r.Term, parts: r.Parts, data: [][]byte{r.Data}, size: len(r.Data)}
			return Step{Decision: Accumulate, Position: f.pos, Discarded: discarded}
		}
		f.pos = next
		return Step{Decision: Apply, Kind: KindTxn, Data: r.Data, Record: r, Position: f.pos, Discarded: discarded}
	case KindFence:
		next.Term = r.Term
		f.pos = next
		return Step{Decision: Apply, Kind: KindFence, Record: r, Position: f.pos, Discarded: discarded}
	default:
		f.pos = next
		return Step{Decision: Apply, Kind: r.Kind, Record: r, Position: f.pos, Discarded: discarded}
	}
}
