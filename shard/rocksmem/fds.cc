#include "fds.h"

#include <memory>
#include <string>

#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/options.h"

using ROCKSDB_NAMESPACE::DirFsyncOptions;
using ROCKSDB_NAMESPACE::Env;
using ROCKSDB_NAMESPACE::FileSystem;
using ROCKSDB_NAMESPACE::FileSystemWrapper;
using ROCKSDB_NAMESPACE::FSDirectory;
using ROCKSDB_NAMESPACE::IODebugContext;
using ROCKSDB_NAMESPACE::IOOptions;
using ROCKSDB_NAMESPACE::IOStatus;
using ROCKSDB_NAMESPACE::Options;

// The C API's options handle (see shim.cc).
struct rocksdb_options_t {
  Options rep;
};

namespace {

// LazyDirectory is a directory RocksDB keeps to fsync after it created or
// renamed a file in it. It opens the directory for each fsync and closes it
// after: on Linux an fsync through any descriptor of the directory makes its
// entries durable, so holding one open between fsyncs buys nothing but an
// fd per directory per database.
class LazyDirectory : public FSDirectory {
 public:
  LazyDirectory(std::shared_ptr<FileSystem> fs, std::string name) : fs_(std::move(fs)), name_(std::move(name)) {}

  IOStatus Fsync(const IOOptions& options, IODebugContext* dbg) override {
    return FsyncWithDirOptions(options, dbg, DirFsyncOptions());
  }

  IOStatus FsyncWithDirOptions(const IOOptions& options, IODebugContext* dbg,
                               const DirFsyncOptions& dir_fsync_options) override {
    std::unique_ptr<FSDirectory> d;
    IOStatus s = fs_->NewDirectory(name_, options, &d, dbg);
    if (!s.ok()) {
      return s;
    }
    s = d->FsyncWithDirOptions(options, dbg, dir_fsync_options);
    IOStatus c = d->Close(options, dbg);
    if (s.ok() && !c.ok() && !c.IsNotSupported()) {
      s = c;
    }
    return s;
  }

  IOStatus Close(const IOOptions&, IODebugContext*) override { return IOStatus::OK(); }

 private:
  std::shared_ptr<FileSystem> fs_;
  std::string name_;
};

// LazyDirFileSystem is the default file system with LazyDirectory for
// directories.
class LazyDirFileSystem : public FileSystemWrapper {
 public:
  explicit LazyDirFileSystem(const std::shared_ptr<FileSystem>& t) : FileSystemWrapper(t), base_(t) {}

  const char* Name() const override { return "ConsumerdLazyDirFileSystem"; }

  // NewDirectory opens the directory once, so a missing one fails here as
  // it would without the wrapper, and closes it at once.
  IOStatus NewDirectory(const std::string& name, const IOOptions& io_opts, std::unique_ptr<FSDirectory>* result,
                        IODebugContext* dbg) override {
    std::unique_ptr<FSDirectory> d;
    IOStatus s = base_->NewDirectory(name, io_opts, &d, dbg);
    if (!s.ok()) {
      return s;
    }
    IOStatus c = d->Close(io_opts, dbg);
    if (!c.ok() && !c.IsNotSupported()) {
      return c;
    }
    result->reset(new LazyDirectory(base_, name));
    return IOStatus::OK();
  }

 private:
  std::shared_ptr<FileSystem> base_;
};

// lazyEnv is the process's one lazy directory env: databases hold a raw
// pointer to their env, so it lives as long as the process.
Env* lazyEnv() {
  static Env* env =
      ROCKSDB_NAMESPACE::NewCompositeEnv(std::make_shared<LazyDirFileSystem>(FileSystem::Default())).release();
  return env;
}

}  // namespace

extern "C" {

void consumerd_use_lazy_dirs(rocksdb_options_t* opts) { opts->rep.env = lazyEnv(); }

int consumerd_uses_lazy_dirs(rocksdb_options_t* opts) { return opts->rep.env == lazyEnv(); }

}  // extern "C"
