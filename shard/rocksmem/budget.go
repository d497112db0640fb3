package rocksmem

/*
#cgo CXXFLAGS: -std=c++17
#cgo LDFLAGS: -lrocksdb -lstdc++
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/bytesize"
)

const (
	// MinBytes is the smallest budget New accepts: below it a write buffer
	// manager's half would not hold one transaction's batch per flush.
	MinBytes = 64 << 20
	// arenaBlockBytes is the memtable arena's block size in a budgeted
	// database whose options leave it to RocksDB (which would pick 1 MiB for
	// a 64 MiB memtable). The write buffer manager counts arena blocks as
	// allocated: with hundreds of databases sharing it, 1 MiB blocks would
	// fill its limit with nearly empty memtables and flush on every write.
	arenaBlockBytes = 64 << 10
)

// ErrClosed is returned by Apply after Close.
var ErrClosed = errors.New("rocksmem: budget closed")

// Budget is the memory the RocksDB databases of one process share: an LRU
// block cache of Bytes capacity, to which a write buffer manager limited to
// half of it charges the memtables. Close it once every database opened
// with options it was applied to is closed.
type Budget struct {
	bytes uint64

	mu sync.RWMutex // Apply and Stats hold it shared; Close exclusively
	b  *C.consumerd_budget_t
}

// New returns a budget of bytes (at least MinBytes), registered with the
// package's metrics until Close.
func New(bytes uint64) (*Budget, error) {
	if err := checkOptionsLayout(); err != nil {
		return nil, err
	}
	if bytes < MinBytes {
		return nil, fmt.Errorf("rocksdb memory budget %s is below the minimum %s", bytesize.Format(bytes), bytesize.Format(MinBytes))
	}
	b := &Budget{bytes: bytes, b: C.consumerd_budget_create(C.size_t(bytes), C.size_t(bytes/2))}
	live.add(b)
	return b, nil
}

// Bytes is the budget's size: the shared block cache's capacity.
func (b *Budget) Bytes() uint64 { return b.bytes }

// Apply makes the database opts will open share the budget: its memtables
// count against the shared write buffer manager, and its block based table
// factory (the default one or one an OptionsIniter set) reads through the
// shared block cache, index and filter blocks included. Options applied to
// keep references to the cache and the manager until they are destroyed.
func (b *Budget) Apply(opts *grocksdb.Options) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.b == nil {
		return ErrClosed
	}
	C.consumerd_budget_apply(b.b, optionsPtr(opts), C.size_t(arenaBlockBytes))
	return nil
}

// Stats are a budget's figures at one moment.
type Stats struct {
	// CacheCapacity and CacheUsage are the shared block cache's capacity
	// and the bytes it holds, memtables charged to it included; CachePinned
	// is the part in use by readers (not evictable).
	CacheCapacity, CacheUsage, CachePinned uint64
	// WriteBufferLimit and WriteBufferUsage are the write buffer manager's
	// limit and the memtable memory of all the databases using it;
	// WriteBufferCharged is what of it is charged to the cache.
	WriteBufferLimit, WriteBufferUsage, WriteBufferCharged uint64
}

// Stats returns the budget's figures (zero after Close).
func (b *Budget) Stats() Stats {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.b == nil {
		return Stats{}
	}
	var s C.consumerd_budget_stats_t
	C.consumerd_budget_stats(b.b, &s)
	return Stats{
		CacheCapacity: uint64(s.cache_capacity), CacheUsage: uint64(s.cache_usage), CachePinned: uint64(s.cache_pinned),
		WriteBufferLimit: uint64(s.write_buffer_limit), WriteBufferUsage: uint64(s.write_buffer_usage),
		WriteBufferCharged: uint64(s.write_buffer_charged),
	}
}

// Close drops the budget's own references to the cache and the write
// buffer manager and unregisters it from the metrics. A database still open
// keeps what it uses alive (RocksDB holds them by shared pointer), so an
// early Close frees nothing twice; it is still a bug: the metrics lose the
// memory. Close is idempotent.
func (b *Budget) Close() {
	live.remove(b)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b != nil {
		C.consumerd_budget_destroy(b.b)
		b.b = nil
	}
}

// applied reports whether opts carry the budget's cache and write buffer
// manager.
func (b *Budget) applied(opts *grocksdb.Options) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.b != nil && C.consumerd_options_has_budget(optionsPtr(opts), b.b) == 1
}
