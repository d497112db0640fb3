// Package rocksmem bounds the memory of all the RocksDB databases of one
// process: a Budget is one LRU block cache and one write buffer manager,
// created once by the member and applied to every shard database's options
// (shard.DBOptions). Memtables are charged to the block cache, so data
// blocks, index and filter blocks and memtables together stay within the
// cache's capacity; the write buffer manager flushes memtables once they
// take half of it, and stalls writes while they would take more. Both are
// reported as Prometheus gauges (metrics.go).
//
// RocksDB 7.8's C API, and so grocksdb v1.7.15, has no write buffer
// manager: shim.cc sets it (and the shared cache) on the C++ Options behind
// grocksdb's handle.
package rocksmem
