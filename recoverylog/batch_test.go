package recoverylog

import (
	"bytes"
	"errors"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/rockstest"
	"github.com/consumerd/consumerd/internal/writebatch"
)

// The room the Recorder leaves behind a Txn's batch (txnTailRoom) holds
// applyToDB's position put, so it is appended in place, and the result is
// the batch RocksDB's own Put makes.
func TestTxnTailRoomHoldsThePositionPut(t *testing.T) {
	wb, want := grocksdb.NewWriteBatch(), grocksdb.NewWriteBatch()
	defer wb.Destroy()
	defer want.Destroy()
	for _, b := range []*grocksdb.WriteBatch{wb, want} {
		b.Put([]byte("a"), []byte("1"))
		b.Delete([]byte("b"))
	}
	pos := EncodePosition(Position{Seq: 7, Checksum: 9, LogID: 300, Term: 2})
	want.Put(PositionKey, pos)

	roomy := append(make([]byte, 0, len(wb.Data())+txnTailRoom), wb.Data()...)
	got, err := writebatch.AppendPut(roomy, PositionKey, pos)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Data()) {
		t.Fatalf("rep differs from RocksDB's:\n got %q\nwant %q", got, want.Data())
	}
	if &got[0] != &roomy[:1][0] {
		t.Fatal("a batch with txnTailRoom to spare was copied")
	}
}

// A Txn whose batch is shorter than a WriteBatch header is a bad record,
// not a write.
func TestApplyToDBRejectsAShortBatch(t *testing.T) {
	db := rockstest.Open(t)
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	err := applyToDB(db, wo, KindTxn, make([]byte, 5), Position{Seq: 1})
	if !errors.Is(err, ErrBadRecord) || !errors.Is(err, writebatch.ErrCorrupt) {
		t.Fatalf("a 5-byte batch: %v, want ErrBadRecord and writebatch.ErrCorrupt", err)
	}
}
