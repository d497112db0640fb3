package shard

import (
	"fmt"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/shard/rocksmem"
)

// bloomBitsPerKey sizes the default Bloom filter: about 1% false positives.
const bloomBitsPerKey = 10

// DefaultDBOptions returns the RocksDB options every shard database starts
// from, before its Consumer's OptionsIniter: RocksDB's defaults plus a
// whole-key Bloom filter of 10 bits a key in every table file. A Get of a
// key the database does not hold — the first read of every key in a
// high-cardinality read-modify-write, a join's probe — then skips the files
// that cannot hold it (about 1% still read) instead of reading a block of
// each; Kafka Streams' stores have one by default too. Table files written
// without a filter stay readable. An OptionsIniter that sets its own block
// based table factory replaces the filter with its own choice. The caller
// destroys the options.
func DefaultDBOptions() *grocksdb.Options {
	opts := grocksdb.NewDefaultOptions()
	bbto := grocksdb.NewDefaultBlockBasedTableOptions()
	bbto.SetFilterPolicy(grocksdb.NewBloomFilterFull(bloomBitsPerKey))
	opts.SetBlockBasedTableFactory(bbto)
	// The factory holds its own copy of the table options (and a reference
	// to the filter policy).
	bbto.Destroy()
	return opts
}

// DBOptions returns the options a database of c opens with:
// DefaultDBOptions with directories held open only while fsynced
// (rocksmem.UseLazyDirectories: an idle database keeps 4 fds, not 6), then
// c's OptionsIniter (c may be nil: defaults alone),
// then the member's memory budget mem (nil: none, each database sizes its
// own cache and memtables). The budget comes last so that every database
// of the member shares its block cache and write buffer manager whatever
// the OptionsIniter set (a table factory of its own included); the
// OptionsIniter tunes the rest. release frees the options once no database
// uses them any more. A panic in InitOptions is returned as an error.
func DBOptions(c Consumer, mem *rocksmem.Budget) (opts *grocksdb.Options, release func(), err error) {
	opts = DefaultDBOptions()
	// Before the OptionsIniter: an app that sets an env of its own keeps it.
	if err := rocksmem.UseLazyDirectories(opts); err != nil {
		opts.Destroy()
		return nil, nil, fmt.Errorf("shard database options: %w", err)
	}
	if oi, ok := c.(OptionsIniter); ok {
		if err := safeCall("InitOptions", func() error { oi.InitOptions(opts); return nil }); err != nil {
			return nil, nil, err // options left to the process: see destroyOptions
		}
	}
	release = func() { destroyOptions(opts, c) }
	if mem != nil {
		if err := mem.Apply(opts); err != nil {
			release()
			return nil, nil, fmt.Errorf("shard database options: %w", err)
		}
	}
	return opts, release, nil
}

// destroyOptions releases options a Consumer's OptionsIniter may have
// changed. grocksdb v1.7.15 hands a merge operator (and a prefix extractor)
// to RocksDB as a shared_ptr and then deletes it again in Options.Destroy, a
// double free that crashes the process once the database is closed. So
// options touched by an OptionsIniter are left to the process (a few KiB per
// database open, and a reference to the member's memory budget, which so
// stays allocated until the process exits); others are destroyed.
func destroyOptions(opts *grocksdb.Options, c Consumer) {
	if _, ok := c.(OptionsIniter); ok {
		return
	}
	opts.Destroy()
}
