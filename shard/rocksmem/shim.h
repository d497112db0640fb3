// The part of RocksDB's C++ API that its C API (7.8) lacks and a memory
// budget needs: a write buffer manager shared by many databases, charged to
// a shared block cache, and setting both on a database's options.
#ifndef CONSUMERD_ROCKSMEM_SHIM_H
#define CONSUMERD_ROCKSMEM_SHIM_H

#include <stddef.h>
#include "rocksdb/c.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct consumerd_budget_t consumerd_budget_t;

// consumerd_budget_create returns a budget of an LRU block cache of
// cache_bytes and a write buffer manager limited to write_buffer_bytes that
// charges memtables to that cache and stalls writes over its limit.
consumerd_budget_t* consumerd_budget_create(size_t cache_bytes, size_t write_buffer_bytes);

// consumerd_budget_destroy drops the budget's references; databases still
// holding the cache or the manager keep them alive until they close.
void consumerd_budget_destroy(consumerd_budget_t* b);

// consumerd_budget_apply sets the write buffer manager on opts and, when
// opts' table factory is block based (and uses a block cache), its block
// cache, with index and filter blocks cached there. An arena block size
// left at 0 is set to arena_block_bytes. Returns 1 when the cache was set,
// 0 when the table factory has none to set.
int consumerd_budget_apply(consumerd_budget_t* b, rocksdb_options_t* opts, size_t arena_block_bytes);

typedef struct {
  size_t cache_capacity;
  size_t cache_usage;
  size_t cache_pinned;
  size_t write_buffer_limit;
  size_t write_buffer_usage;
  size_t write_buffer_charged;
} consumerd_budget_stats_t;

void consumerd_budget_stats(consumerd_budget_t* b, consumerd_budget_stats_t* out);

// consumerd_options_has_budget reports whether opts carry b's write buffer
// manager and block cache (tests).
int consumerd_options_has_budget(rocksdb_options_t* opts, consumerd_budget_t* b);

#ifdef __cplusplus
}
#endif

#endif
