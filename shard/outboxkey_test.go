package shard

import (
	"fmt"
	"testing"

	"github.com/linxGnu/grocksdb"
)

// outboxKey's hand-written hex must give the keys the fmt form gave (rows
// stored by earlier releases sort and parse alike).
func TestOutboxKeyFormat(t *testing.T) {
	for _, c := range []struct {
		txn uint64
		i   int
	}{{0, 0}, {1, 2}, {0xdeadbeef, 0xabc}, {1<<64 - 1, 1<<32 - 1}, {1 << 40, 99_999}} {
		want := fmt.Sprintf("%s%016x/%08x", outboxPrefix, c.txn, c.i)
		if got := string(outboxKey(c.txn, c.i)); got != want {
			t.Errorf("outboxKey(%#x, %d) = %q, want %q", c.txn, c.i, got, want)
		}
		txn, i, err := parseOutboxKey(outboxKey(c.txn, c.i))
		if err != nil || txn != c.txn || i != c.i {
			t.Errorf("parseOutboxKey(outboxKey(%#x, %d)) = %#x, %d, %v", c.txn, c.i, txn, i, err)
		}
	}
}

// The overlay leaves consumerd's own keys out (writes and range deletions
// of them only), and still reads the application's around them.
func TestOverlaySkipsOwnKeys(t *testing.T) {
	ov := newOverlay()
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	wb.Put([]byte("\x00consumerd/outbox/x"), []byte("row"))
	wb.Put([]byte("a"), []byte("1"))
	wb.DeleteRange([]byte("\x00consumerd/outbox/"), []byte("\x00consumerd/outbox0"))
	wb.Put([]byte("b"), []byte("2"))
	if err := ov.update(wb.Data()); err != nil {
		t.Fatal(err)
	}
	if len(ov.entries) != 2 || len(ov.ranges) != 0 {
		t.Fatalf("overlay holds %d entries and %d ranges, want 2 and 0", len(ov.entries), len(ov.ranges))
	}
	for k, want := range map[string]string{"a": "1", "b": "2"} {
		if res, v := ov.lookup([]byte(k)); res != lookupValue || string(v) != want {
			t.Errorf("lookup(%q) = %v, %q; want %q", k, res, v, want)
		}
	}
	if res, _ := ov.lookup([]byte("\x00consumerd/outbox/x")); res != lookupMiss {
		t.Errorf("own key: %v, want a miss (read from the database)", res)
	}
}
