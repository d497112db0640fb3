package shard

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/shard/rocksmem"
)

// internalPrefix prefixes the keys consumerd itself keeps in a shard DB
// (recovery-log position, source offsets). Applications must not write
// keys with this prefix; the compaction filter never drops them.
var internalPrefix = []byte("\x00consumerd/")

// shardDB is an open shard database with the options it was opened with.
type shardDB struct {
	dir     string
	db      *grocksdb.DB
	opts    *grocksdb.Options
	release func() // the options'
	ro      *grocksdb.ReadOptions
	wo      *grocksdb.WriteOptions
}

// openShardDB opens (creating if missing) the shard's RocksDB at dir, with
// DBOptions(c, mem) and c's Filterer. Writes never use
// RocksDB's own WAL: the recovery log is the database's log.
func openShardDB(dir string, c Consumer, mem *rocksmem.Budget, logger hclog.Logger) (*shardDB, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("create shard data directory: %w", err)
	}
	opts, release, err := DBOptions(c, mem)
	if err != nil {
		return nil, err
	}
	opts.SetCreateIfMissing(true)
	if f, ok := c.(Filterer); ok {
		opts.SetCompactionFilter(&compactionFilter{f: f, logger: logger})
	}
	db, err := grocksdb.OpenDb(opts, dir)
	if err != nil {
		release()
		return nil, fmt.Errorf("open rocksdb %s: %w", dir, err)
	}
	wo := grocksdb.NewDefaultWriteOptions()
	wo.DisableWAL(true)
	return &shardDB{dir: dir, db: db, opts: opts, release: release, ro: grocksdb.NewDefaultReadOptions(), wo: wo}, nil
}

func (d *shardDB) Close() {
	d.db.Close()
	d.ro.Destroy()
	d.wo.Destroy()
	d.release()
}

// compactionFilter adapts a Filterer: consumerd's own keys are never passed
// to it, and a panic in the application keeps the key unchanged (it runs on
// RocksDB's threads, where a panic would kill the process).
type compactionFilter struct {
	f      Filterer
	logger hclog.Logger

	// kept holds, per OS thread, the last rewritten value handed to
	// RocksDB. grocksdb v1.7.15 passes newVal to RocksDB as a pointer into
	// Go memory, and RocksDB copies it only after the Go callback returned,
	// when nothing in Go references it: a garbage collection in between
	// could free it. RocksDB has copied it before the same thread calls the
	// filter again (a cgo callback runs on the calling C thread), so keeping
	// the latest value per thread is enough, and bounded by RocksDB's
	// compaction threads.
	mu   sync.Mutex
	kept map[int][]byte
}

func (c *compactionFilter) Name() string { return "consumerd.Filterer" }

func (c *compactionFilter) SetIgnoreSnapshots(bool) {}

func (c *compactionFilter) Destroy() {}

func (c *compactionFilter) Filter(level int, key, val []byte) (remove bool, newVal []byte) {
	if bytes.HasPrefix(key, internalPrefix) {
		return false, nil
	}
	defer func() {
		if r := recover(); r != nil {
			c.logger.Error("compaction filter panicked; keeping the key unchanged", "key", fmt.Sprintf("%q", key), "panic", r)
			remove, newVal = false, nil
		}
	}()
	remove, newVal = c.f.Filter(level, key, val)
	if remove {
		return true, nil
	}
	if newVal != nil {
		c.mu.Lock()
		if c.kept == nil {
			c.kept = make(map[int][]byte)
		}
		c.kept[osThreadID()] = newVal
		c.mu.Unlock()
	}
	return false, newVal
}
