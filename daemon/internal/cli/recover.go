package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/internal/ident"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	"github.com/consumerd/consumerd/shard"
)

func newShardsRecoverCommand(prog cmdline.Program) *cobra.Command {
	var cf connect.ClientFlags
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
				return cmdline.Usagef("--shard: required")
			}
			if err := ident.Check(shardID); err != nil {
				return cmdline.Usagef("--shard: %v", err)
			}
			if dir == "" {
				return cmdline.Usagef("--dir: required")
			}
			ctx := cmd.Context()
			cli, err := cf.Etcd(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			start := time.Now()
			res, err := rebuildShard(ctx, &cf, cli, prog, shardID, dir, snapDir)
			if err != nil {
				return err
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
	cf.Bind(cmd.Flags())
	cmd.Flags().StringVar(&shardID, "shard", "", "the shard to recover")
	cmd.Flags().StringVar(&dir, "dir", "", "directory to build the shard's RocksDB in (must not exist or be empty)")
	cmd.Flags().StringVar(&snapDir, "snapshot.dir", "", "read snapshots from this directory store instead of the JetStream object store")
	return cmd
}

// rebuildShard builds shard shardID's RocksDB in dir as a new replica
// does: the newest usable snapshot, then the recovery log after it.
func rebuildShard(ctx context.Context, cf *connect.ClientFlags, cli *clientv3.Client, prog cmdline.Program, shardID, dir, snapDir string) (snapshot.RecoverResult, error) {
	var none snapshot.RecoverResult
	dbOpts, release, err := recoverDBOptions(ctx, cli, cf.EtcdPrefix, shardID, prog)
	if err != nil {
		return none, err
	}
	defer release()
	opener, err := cf.OpenWAL(recoverLogger(prog), 0)
	if err != nil {
		return none, err
	}
	defer opener.Close()
	ns, err := cf.Namespace()
	if err != nil {
		return none, cmdline.Usage(err)
	}
	sec, err := cf.WALSec.NATS()
	if err != nil {
		return none, err
	}
	st, closeStore, err := connect.OpenSnapshotStore(ctx, snapDir, cf.WALURL, ns, 1, 0, sec, hclog.NewNullLogger())
	if err != nil {
		return none, err
	}
	defer closeStore()
	res, err := snapshot.Recover(ctx, snapshot.RecoverConfig{
		Shard: shardID, Dir: dir, Store: st, Etcd: cli, Prefix: cf.EtcdPrefix,
		Opener: opener, Options: dbOpts, Logger: recoverLogger(prog),
	})
	if err != nil {
		return none, fmt.Errorf("recover shard %s into %s: %w", shardID, dir, err)
	}
	return res, nil
}

// recoverDBOptions are the options the shard's app opens its database
// with (shard.DBOptions of its Consumer), or shard.DBOptions' defaults when
// the spec or the app is unknown here; release frees them after use.
// CreateIfMissing is set.
func recoverDBOptions(ctx context.Context, cli *clientv3.Client, prefix, shardID string, prog cmdline.Program) (*grocksdb.Options, func(), error) {
	resp, err := cli.Get(ctx, allocator.ItemKey(prefix, shardID))
	if err != nil {
		return nil, nil, fmt.Errorf("read shard spec %s: %w", shardID, err)
	}
	var c shard.Consumer // nil: a deleted shard's log may still be recovered
	if len(resp.Kvs) > 0 {
		if item, err := shard.DecodeSpec(shardID, resp.Kvs[0].Value); err == nil {
			if spec, ok := item.(*shard.Spec); ok {
				if app, ok := prog.AppMap()[spec.App]; ok && app.NewConsumer != nil {
					c = app.NewConsumer()
				}
			}
		}
	}
	o, release, err := shard.DBOptions(c, nil) // offline: no member budget
	if err != nil {
		return nil, nil, fmt.Errorf("shard %s: database options: %w", shardID, err)
	}
	o.SetCreateIfMissing(true)
	return o, release, nil
}

// recoverLogger logs warnings (e.g. a snapshot falling back) to stderr.
func recoverLogger(prog cmdline.Program) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "consumerd", Level: hclog.Warn, Output: prog.Stderr})
}
