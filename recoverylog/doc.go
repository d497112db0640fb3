// Package recoverylog keeps a shard's RocksDB in step with its recovery log.
package recoverylog
