package writebatch_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/consumerd/consumerd/internal/writebatch"
)

// AppendPut writes in place when the rep has PutLen bytes to spare, else
// leaves it as it was; PutLen is exact. (That its bytes are RocksDB's is
// checked by the build cases of TestDataDriven.)
func TestAppendPutRoom(t *testing.T) {
	header := make([]byte, writebatch.HeaderLen)
	for _, size := range []int{0, 1, 127, 128, 16383, 16384, 70000} {
		key, value := bytes.Repeat([]byte("k"), size), bytes.Repeat([]byte("v"), size/2)
		room := writebatch.PutLen(len(key), len(value))

		roomy := append(make([]byte, 0, len(header)+room), header...)
		got, err := writebatch.AppendPut(roomy, key, value)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(header)+room {
			t.Fatalf("key %d, value %d bytes: appended %d bytes, PutLen says %d", len(key), len(value), len(got)-len(header), room)
		}
		if &got[0] != &roomy[:1][0] {
			t.Fatalf("key %d bytes: a rep with PutLen to spare was copied", size)
		}
		if c := writebatch.Count(got); c != 1 {
			t.Fatalf("count %d after one put", c)
		}

		tight := slices.Clip(slices.Clone(header))
		again, err := writebatch.AppendPut(tight, key, value)
		if err != nil || !bytes.Equal(again, got) {
			t.Fatalf("without room: %v, rep %x", err, again)
		}
		if !bytes.Equal(tight, header) {
			t.Fatal("a rep without room was written in place")
		}
	}
	if _, err := writebatch.AppendPut(make([]byte, 5), []byte("k"), nil); !errors.Is(err, writebatch.ErrCorrupt) {
		t.Fatalf("a 5-byte rep: %v, want ErrCorrupt", err)
	}
}
