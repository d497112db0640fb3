// Package rockstest reads whole RocksDB databases for tests that compare
// state: a primary against a standby, a restore against the live DB, a run
// with crashes against one without.
package rockstest
