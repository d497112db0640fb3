package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/internal/ident"
	"github.com/consumerd/consumerd/internal/natsconn"
	"github.com/consumerd/consumerd/internal/retry"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	"github.com/consumerd/consumerd/shard"
)

// openSnapshotStore opens the snapshot store: a directory store when dir is
// set, else the JetStream object store on the WAL's NATS (the bucket of the
// cluster's WAL namespace). close releases it.
func openSnapshotStore(ctx context.Context, dir, walURL, namespace string, replicas int, wait time.Duration, sec natsconn.Security, log hclog.Logger) (st snapshot.Store, closeFn func(), err error) {
	if dir != "" {
		ds, err := snapshot.NewDirStore(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("--snapshot.dir: %w", err)
		}
		return ds, func() {}, nil
	}
	// A NATS cluster electing a leader (a server just lost) leaves requests
	// unanswered for a while: each try is bounded, and tries go on for
	// wait (serve: a minute; a client command: one try) before giving up,
	// naming the last error.
	var js *snapshot.JetStreamStore
	wctx, cancel := context.WithTimeout(ctx, max(wait, 10*time.Second))
	defer cancel()
	attempts := 0 // until wctx ends
	if wait <= 0 {
		attempts = 1
	}
	err = retry.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Attempts: attempts}.Do(wctx, retry.Call{
		OnRetry: func(attempt int, wait time.Duration, err error) {
			log.Warn("snapshot store not reachable yet; retrying", "attempt", attempt, "in", wait, "error", err)
		},
	}, func() error {
		tctx, cancel := context.WithTimeout(wctx, 10*time.Second)
		defer cancel()
		var derr error
		js, derr = snapshot.DialJetStreamStore(tctx, walURL, snapshot.JetStreamConfig{Bucket: snapshot.BucketName(namespace), Replicas: replicas, Security: sec})
		if derr != nil && wctx.Err() == nil {
			return errors.New(derr.Error()) // this try's own deadline: retry
		}
		return derr
	})
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot store: %w", withHint(err, natsHint(err)))
	}
	return js, js.Close, nil
}

// snapshotOptions is the shard service's snapshot configuration for serve.
func snapshotOptions(st snapshot.Store, cli *clientv3.Client) *shard.SnapshotOptions {
	if st == nil {
		return nil
	}
	return &shard.SnapshotOptions{Store: st, Etcd: cli}
}

func newShardsRecoverCommand(opts Options) *cobra.Command {
	var cf clientFlags
	var shardID, dir, snapDir string
	cmd := &cobra.Command{
		Use:   "recover --shard ID --dir DIR",
		Short: "Rebuild a shard's state offline into a directory (snapshot + replay of the log after it)",
		Long: `recover builds a shard's RocksDB in DIR the way a new replica does: it
restores the newest usable snapshot named by <prefix>/snapshots/<shard> (a
corrupt or missing file falls back to an older snapshot), then replays the
recovery log after it up to its current head. DIR must not exist or be empty.
Snapshots are read from the JetStream object store on --wal.url, or from
--snapshot.dir. The shard keeps running; recover only reads.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if shardID == "" {
				return usagef("--shard: required")
			}
			if err := ident.Check(shardID); err != nil {
				return usagef("--shard: %v", err)
			}
			if dir == "" {
				return usagef("--dir: required")
			}
			ctx := cmd.Context()
			cli, err := cf.etcd(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			dbOpts, release, err := recoverDBOptions(ctx, cli, cf.etcdPrefix, shardID, opts)
			if err != nil {
				return err
			}
			defer release()
			opener, err := cf.openWAL(recoverLogger(opts))
			if err != nil {
				return err
			}
			defer opener.Close()
			ns, err := cf.namespace()
			if err != nil {
				return usageError{err}
			}
			sec, err := cf.walSec.natsSecurity()
			if err != nil {
				return err
			}
			st, closeStore, err := openSnapshotStore(ctx, snapDir, cf.walURL, ns, 1, 0, sec, hclog.NewNullLogger())
			if err != nil {
				return err
			}
			defer closeStore()
			start := time.Now()
			res, err := snapshot.Recover(ctx, snapshot.RecoverConfig{
				Shard: shardID, Dir: dir, Store: st, Etcd: cli, Prefix: cf.etcdPrefix,
				Opener: opener, Options: dbOpts, Logger: recoverLogger(opts),
			})
			if err != nil {
				return fmt.Errorf("recover shard %s into %s: %w", shardID, dir, err)
			}
			if res.Manifest == nil && res.Position.Seq == 0 {
				// An empty database is not a recovery: most likely a wrong
				// shard id (or --etcd.prefix, --wal.namespace).
				if ents, err := os.ReadDir(dir); err == nil {
					for _, e := range ents {
						_ = os.RemoveAll(filepath.Join(dir, e.Name()))
					}
				}
				return fmt.Errorf("recover shard %s: no snapshot and nothing in its recovery log: nothing to recover (`shards list` names the shards; check --etcd.prefix and --wal.namespace)", shardID)
			}
			from := "the start of the recovery log (no snapshot)"
			if res.Manifest != nil {
				from = fmt.Sprintf("snapshot %s (log id %d, %d bytes)", res.Manifest.ID, res.Manifest.LogID, res.Manifest.Size())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "recovered shard %s into %s from %s; replayed to log id %d (seq %d) in %s\n",
				shardID, dir, from, res.Position.LogID, res.Position.Seq, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	cf.bind(cmd.Flags())
	cmd.Flags().StringVar(&shardID, "shard", "", "the shard to recover")
	cmd.Flags().StringVar(&dir, "dir", "", "directory to build the shard's RocksDB in (must not exist or be empty)")
	cmd.Flags().StringVar(&snapDir, "snapshot.dir", "", "read snapshots from this directory store instead of the JetStream object store")
	return cmd
}

// recoverDBOptions are the options the shard's app opens its database
// with (shard.DBOptions of its Consumer), or shard.DBOptions' defaults when
// the spec or the app is unknown here; release frees them after use.
// CreateIfMissing is set.
func recoverDBOptions(ctx context.Context, cli *clientv3.Client, prefix, shardID string, opts Options) (*grocksdb.Options, func(), error) {
	resp, err := cli.Get(ctx, allocator.ItemKey(prefix, shardID))
	if err != nil {
		return nil, nil, fmt.Errorf("read shard spec %s: %w", shardID, err)
	}
	var c shard.Consumer // nil: a deleted shard's log may still be recovered
	if len(resp.Kvs) > 0 {
		if item, err := shard.DecodeSpec(shardID, resp.Kvs[0].Value); err == nil {
			if spec, ok := item.(*shard.Spec); ok {
				if app, ok := opts.appMap()[spec.App]; ok && app.NewConsumer != nil {
					c = app.NewConsumer()
				}
			}
		}
	}
	o, release, err := shard.DBOptions(c)
	if err != nil {
		return nil, nil, fmt.Errorf("shard %s: database options: %w", shardID, err)
	}
	o.SetCreateIfMissing(true)
	return o, release, nil
}

// recoverLogger logs warnings (e.g. a snapshot falling back) to stderr.
func recoverLogger(opts Options) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "consumerd", Level: hclog.Warn, Output: opts.Stderr})
}
