package rocksmem

/*
#include "fds.h"
*/
import "C"

import (
	"github.com/linxGnu/grocksdb"
)

// UseLazyDirectories makes the database opts will open keep no directory
// open between fsyncs: RocksDB's default env otherwise holds two directory
// fds per database for as long as it is open (a member of 1,000 idle shards
// 2,000 fds). Each directory fsync opens and closes the directory instead;
// durability is the same (an fsync through any descriptor of a directory
// makes its entries durable). It lives here, with the package's other
// RocksDB C++ shim, rather than in a package of its own.
func UseLazyDirectories(opts *grocksdb.Options) error {
	if err := checkOptionsLayout(); err != nil {
		return err
	}
	C.consumerd_use_lazy_dirs(optionsPtr(opts))
	return nil
}

// usesLazyDirectories reports whether opts carry the lazy directory env.
func usesLazyDirectories(opts *grocksdb.Options) bool {
	return C.consumerd_uses_lazy_dirs(optionsPtr(opts)) != 0
}
