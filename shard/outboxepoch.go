package shard

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/linxGnu/grocksdb"
)

// Outbox epochs: which marker chain a transaction's outputs go on.
//
// txn numbers are the shard's own: a recovery log that lost its tail, once
// accepted ('shards reset' raises the spec's LogResetTerm), has the shard
// number new transactions again from the last one the log kept. On the old
// chain those numbers may already be covered by markers of the lost
// transactions, so a new transaction would be taken for published. A
// primary whose spec's LogResetTerm is above the one its epoch was made
// under therefore starts a new epoch with the first transaction that
// stages outputs; transactions committed before it keep their epoch, and
// their chain (a retired one), until they are out.
//
//	\x00consumerd/outbox-epochs/<from:016x>  the epoch of txns >= from (until the next)
//	\x00consumerd/outbox-epoch-reset         the LogResetTerm the current epoch was made under
//
// A shard that never started a second epoch has no outbox-epochs keys: its
// every txn is on outbox-epoch. A loss no reset accepted yet is found by the
// drainer (outcheck.go): a marker of the current epoch for a txn beyond the
// shard's own last one fails the shard, naming 'shards reset'.
var (
	outboxEpochsPrefix  = []byte("\x00consumerd/outbox-epochs/")
	outboxEpochResetKey = []byte("\x00consumerd/outbox-epoch-reset")
)

// epochFrom is an epoch and the first txn on it.
type epochFrom struct {
	from  uint64
	epoch string
}

func outboxEpochsKey(from uint64) []byte {
	k := append([]byte(nil), outboxEpochsPrefix...)
	k = append(k, make([]byte, 16)...)
	putHex(k[len(outboxEpochsPrefix):], from)
	return k
}

// loadEpochs reads the outbox-epochs keys, in txn order, and the reset term.
func loadEpochs(db *grocksdb.DB, ro *grocksdb.ReadOptions, st *outboxState) error {
	rt, err := loadUint(db, ro, outboxEpochResetKey)
	if err != nil {
		return err
	}
	st.resetTerm = int64(rt)
	it := db.NewIterator(ro)
	defer it.Close()
	for it.Seek(outboxEpochsPrefix); it.ValidForPrefix(outboxEpochsPrefix); it.Next() {
		k, v := it.Key(), it.Value()
		hexFrom, _ := strings.CutPrefix(string(k.Data()), string(outboxEpochsPrefix))
		from, perr := strconv.ParseUint(hexFrom, 16, 64)
		e := epochFrom{from: from, epoch: string(v.Data())}
		k.Free()
		v.Free()
		if perr != nil {
			return fmt.Errorf("outbox epoch key %q: %w", hexFrom, perr)
		}
		st.epochs = append(st.epochs, e)
	}
	return it.Err()
}

// epochOf is the epoch of txn's outputs.
func (st *outboxState) epochOf(txn uint64) string {
	e := st.epoch
	for _, x := range st.epochs {
		if x.from <= txn {
			e = x.epoch
		}
	}
	return e
}

// needsEpoch reports whether the next transaction that stages outputs
// starts a new epoch: the shard's first outputs, or the first after a
// 'shards reset' (resetTerm: the spec's LogResetTerm).
func (st *outboxState) needsEpoch(resetTerm int64) bool {
	return st.epoch == "" || resetTerm > st.resetTerm
}

// startEpoch makes a new epoch from txn on, made under resetTerm, and puts
// it in batch.
func (st *outboxState) startEpoch(batch *grocksdb.WriteBatch, txn uint64, resetTerm int64) {
	e := newEpoch()
	if st.epoch != "" {
		// A second epoch: the txns before it keep theirs.
		if len(st.epochs) == 0 {
			batch.Put(outboxEpochsKey(0), []byte(st.epoch))
			st.epochs = append(st.epochs, epochFrom{0, st.epoch})
		}
		batch.Put(outboxEpochsKey(txn), []byte(e))
		st.epochs = append(st.epochs, epochFrom{txn, e})
	}
	batch.Put(outboxEpochKey, []byte(e))
	if resetTerm > 0 {
		batch.Put(outboxEpochResetKey, strconv.AppendInt(nil, resetTerm, 10))
	}
	st.epoch, st.resetTerm = e, resetTerm
}

// retiredEpochs are the epochs no new transaction goes on: every epoch
// known but the current one, and the current one too when the next
// transaction starts a new epoch (resetTerm: the spec's LogResetTerm).
func (st *outboxState) retiredEpochs(resetTerm int64) map[string]bool {
	r := map[string]bool{}
	for _, e := range st.epochs {
		r[e.epoch] = true
	}
	if st.epoch != "" {
		r[st.epoch] = st.needsEpoch(resetTerm)
	}
	return r
}
