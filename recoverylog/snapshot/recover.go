package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/wal"
)

// RecoverConfig configures Recover.
type RecoverConfig struct {
	// Shard is the shard id.
	Shard string
	// Dir is the directory to build the database in; it must not exist or
	// be empty.
	Dir string
	// Store holds the shard's snapshots; nil replays the whole log.
	Store Store
	// Etcd and Prefix locate the snapshot pointer; a nil Etcd tries every
	// manifest in the store, newest first.
	Etcd   *clientv3.Client
	Prefix string
	// Opener opens the shard's recovery log (read only, term 0).
	Opener wal.Opener
	// Options open the database (nil: RocksDB defaults with
	// CreateIfMissing). Not destroyed.
	Options *grocksdb.Options
	Logger  hclog.Logger
}

// RecoverResult describes a finished Recover.
type RecoverResult struct {
	// Manifest is the snapshot restored, or nil when the log was replayed
	// from its start.
	Manifest *Manifest
	// Position is the database's position after replaying the log.
	Position recoverylog.Position
	// RestoreDuration is the time Restore took (zero with no snapshot
	// restored); the rest of Recover replays the log and flushes.
	RestoreDuration time.Duration
}

// Recover rebuilds a shard's state offline into cfg.Dir, the way a new
// replica does: it restores the newest usable snapshot (falling back to
// older ones), then replays the recovery log after it up to the log's head
// as seen at the start, and closes the database. With no usable snapshot it
// replays the log from its start, which fails (wrapping wal.ErrTruncated)
// if the log was truncated.
func Recover(ctx context.Context, cfg RecoverConfig) (RecoverResult, error) {
	var res RecoverResult
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if cfg.Shard == "" || cfg.Dir == "" || cfg.Opener == nil {
		return res, errors.New("snapshot: recover needs a shard, a directory and a WAL opener")
	}
	if ents, err := os.ReadDir(cfg.Dir); err == nil && len(ents) > 0 {
		return res, fmt.Errorf("snapshot: recover shard %s: directory %s is not empty", cfg.Shard, cfg.Dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return res, fmt.Errorf("snapshot: recover shard %s: %w", cfg.Shard, err)
	}
	if cfg.Store != nil {
		var ptr *Pointer
		if cfg.Etcd != nil {
			p, ok, err := LoadPointer(ctx, cfg.Etcd, cfg.Prefix, cfg.Shard)
			if err != nil {
				return res, err
			}
			if ok {
				ptr = &p
			}
		}
		start := time.Now()
		m, err := Restore(ctx, RestoreConfig{Store: cfg.Store, Shard: cfg.Shard, Pointer: ptr, Dir: cfg.Dir, Options: cfg.Options, Logger: logger})
		switch {
		case err == nil:
			res.Manifest = m
			res.RestoreDuration = time.Since(start)
		case errors.Is(err, ErrNoSnapshot):
			logger.Warn("no usable snapshot; replaying the whole recovery log", "shard", cfg.Shard, "error", err)
		default:
			return res, err
		}
	}
	opts := cfg.Options
	if opts == nil {
		opts = grocksdb.NewDefaultOptions()
		opts.SetCreateIfMissing(true)
		defer opts.Destroy()
	}
	db, err := grocksdb.OpenDb(opts, cfg.Dir)
	if err != nil {
		return res, fmt.Errorf("snapshot: recover shard %s: open %s: %w", cfg.Shard, cfg.Dir, err)
	}
	defer db.Close()
	pos, err := ReplayToHead(ctx, cfg.Opener, db, cfg.Shard, logger)
	res.Position = pos
	if err != nil {
		return res, err
	}
	// Make the replayed state durable (writes skip RocksDB's WAL).
	fo := grocksdb.NewDefaultFlushOptions()
	defer fo.Destroy()
	fo.SetWait(true)
	if err := db.Flush(fo); err != nil {
		return res, fmt.Errorf("snapshot: recover shard %s: flush: %w", cfg.Shard, err)
	}
	return res, nil
}

// ReplayToHead replays the shard's recovery log into db from the position
// stored in it until it caught up with the log's head as seen at the
// start, and returns the position reached.
func ReplayToHead(ctx context.Context, opener wal.Opener, db *grocksdb.DB, shard string, logger hclog.Logger) (recoverylog.Position, error) {
	ch := recoverylog.Channel(shard)
	log, err := opener.Open(ctx, &wal.OpenOption{Channel: ch})
	if err != nil {
		return recoverylog.Position{}, fmt.Errorf("snapshot: open recovery log %s: %w", ch, err)
	}
	defer log.Close()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pl := recoverylog.NewPlayer(recoverylog.PlayerConfig{Log: log, DB: db, Logger: logger, ShardID: shard})
	errc := make(chan error, 1)
	go func() { errc <- pl.Play(pctx) }()
	select {
	case <-pl.CaughtUp():
		cancel()
		<-errc
		return pl.Position(), nil
	case err := <-errc:
		if ctx.Err() != nil {
			return pl.Position(), ctx.Err()
		}
		return pl.Position(), fmt.Errorf("snapshot: replay %s: %w", ch, err)
	}
}
