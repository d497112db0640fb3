// A RocksDB Env whose directory handles hold no file descriptor between
// fsyncs, so an idle database keeps fewer open.
#ifndef CONSUMERD_ROCKSMEM_FDS_H
#define CONSUMERD_ROCKSMEM_FDS_H

#include "rocksdb/c.h"

#ifdef __cplusplus
extern "C" {
#endif

// consumerd_use_lazy_dirs sets opts' env to the process's one lazy
// directory env: RocksDB's default env, except that a directory it keeps
// to fsync opens it for each fsync and closes it after, instead of holding
// it open for as long as the database is (two fds a database).
void consumerd_use_lazy_dirs(rocksdb_options_t* opts);

// consumerd_uses_lazy_dirs reports whether opts carry that env (tests).
int consumerd_uses_lazy_dirs(rocksdb_options_t* opts);

#ifdef __cplusplus
}
#endif

#endif
