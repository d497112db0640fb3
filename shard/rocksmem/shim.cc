#include "shim.h"

#include <memory>

#include "rocksdb/cache.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"
#include "rocksdb/write_buffer_manager.h"

using ROCKSDB_NAMESPACE::BlockBasedTableOptions;
using ROCKSDB_NAMESPACE::Cache;
using ROCKSDB_NAMESPACE::NewLRUCache;
using ROCKSDB_NAMESPACE::Options;
using ROCKSDB_NAMESPACE::WriteBufferManager;

// The C API's options handle, as RocksDB's db/c.cc defines it: the C
// API hands out a pointer to this struct, whose only member is the C++
// Options.
struct rocksdb_options_t {
  Options rep;
};

struct consumerd_budget_t {
  std::shared_ptr<Cache> cache;
  std::shared_ptr<WriteBufferManager> wbm;
};

extern "C" {

consumerd_budget_t* consumerd_budget_create(size_t cache_bytes, size_t write_buffer_bytes) {
  auto* b = new consumerd_budget_t;
  b->cache = NewLRUCache(cache_bytes);
  b->wbm = std::make_shared<WriteBufferManager>(write_buffer_bytes, b->cache, /*allow_stall=*/true);
  return b;
}

void consumerd_budget_destroy(consumerd_budget_t* b) { delete b; }

int consumerd_budget_apply(consumerd_budget_t* b, rocksdb_options_t* opts, size_t arena_block_bytes) {
  Options& o = opts->rep;
  o.write_buffer_manager = b->wbm;
  if (o.arena_block_size == 0) {
    o.arena_block_size = arena_block_bytes;
  }
  if (o.table_factory == nullptr) {
    return 0;
  }
  auto* t = o.table_factory->GetOptions<BlockBasedTableOptions>();
  if (t == nullptr || t->no_block_cache) {
    return 0;
  }
  t->block_cache = b->cache;
  t->cache_index_and_filter_blocks = true;
  return 1;
}

void consumerd_budget_stats(consumerd_budget_t* b, consumerd_budget_stats_t* out) {
  out->cache_capacity = b->cache->GetCapacity();
  out->cache_usage = b->cache->GetUsage();
  out->cache_pinned = b->cache->GetPinnedUsage();
  out->write_buffer_limit = b->wbm->buffer_size();
  out->write_buffer_usage = b->wbm->memory_usage();
  out->write_buffer_charged = b->wbm->dummy_entries_in_cache_usage();
}

int consumerd_options_has_budget(rocksdb_options_t* opts, consumerd_budget_t* b) {
  Options& o = opts->rep;
  if (o.write_buffer_manager != b->wbm || o.table_factory == nullptr) {
    return 0;
  }
  auto* t = o.table_factory->GetOptions<BlockBasedTableOptions>();
  return t != nullptr && t->block_cache == b->cache && t->cache_index_and_filter_blocks;
}

}  // extern "C"
