package shard

import (
	"bytes"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/rockstest"
	"github.com/consumerd/consumerd/topic"
)

// rewriter is a Consumer whose Filterer drops "drop/" keys, upper-cases
// the values of "up/" keys (idempotent, as Filterer requires), empties
// "empty/" values, panics on "panic/" keys and would drop everything else
// -- so any of consumerd's own keys that reached it would vanish.
type rewriter struct{}

var _ Filterer = rewriter{}

func (rewriter) Consume(Shard, topic.Envelope, Publisher) error { return nil }
func (rewriter) Flush(Shard, Publisher) error                   { return nil }

func (rewriter) Filter(_ int, key, val []byte) (bool, []byte) {
	switch {
	case bytes.HasPrefix(key, []byte("keep/")):
		return false, nil
	case bytes.HasPrefix(key, []byte("up/")):
		return false, bytes.ToUpper(val)
	case bytes.HasPrefix(key, []byte("empty/")):
		return false, []byte{}
	case bytes.HasPrefix(key, []byte("panic/")):
		panic("filter bug")
	}
	return true, nil // "drop/", and consumerd's own keys if they were passed
}

// lockedBuffer is a log sink written from RocksDB's compaction threads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestFiltererCompaction opens a shard database the way a replica does
// (openShardDB wires the Consumer's Filterer), writes keys, forces a
// compaction, and reads back: removed keys are gone, rewritten values are
// rewritten, and consumerd's own keys and the key whose filter call
// panicked are unchanged.
func TestFiltererCompaction(t *testing.T) {
	var logs lockedBuffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Error})
	dir := filepath.Join(t.TempDir(), "shards", "f-0")
	sdb, err := openShardDB(dir, rewriter{}, nil, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()

	before := map[string]string{
		"drop/a":                              "1",
		"drop/b":                              "2",
		"up/a":                                "hello",
		"up/b":                                "Mixed Case",
		"empty/a":                             "not empty yet",
		"keep/a":                              "as is",
		"panic/a":                             "survives",
		string(internalPrefix) + "offset/x":   "42",
		string(internalPrefix) + "position":   "p",
		string(internalPrefix) + "up/similar": "lower",
	}
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	for k, v := range before {
		wb.Put([]byte(k), []byte(v))
	}
	if err := sdb.db.Write(sdb.wo, wb); err != nil {
		t.Fatal(err)
	}
	if got := rockstest.Map(t, sdb.db); len(got) != len(before) {
		t.Fatalf("before compaction: %v", got)
	}

	sdb.db.CompactRange(grocksdb.Range{}) // flushes the memtable, then compacts it through the filter

	want := map[string]string{
		"up/a":                                "HELLO",
		"up/b":                                "MIXED CASE",
		"empty/a":                             "",
		"keep/a":                              "as is",
		"panic/a":                             "survives",
		string(internalPrefix) + "offset/x":   "42",
		string(internalPrefix) + "position":   "p",
		string(internalPrefix) + "up/similar": "lower",
	}
	got := rockstest.Map(t, sdb.db)
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("after compaction %q = %q (present %v), want %q", k, g, ok, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("after compaction %q is still there", k)
		}
	}
	if l := logs.String(); !strings.Contains(l, "compaction filter panicked") || !strings.Contains(l, "panic/a") {
		t.Errorf("the panic was not logged with its key: %q", l)
	}
}
