package server

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/internal/embedetcd"
	"github.com/consumerd/consumerd/internal/embednats"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
)

// The steps of a member's start, in order (Run). Each registers what it
// must undo on down.

// startEtcd starts the embedded etcd when --etcd.endpoints is empty,
// connects to etcd (waiting for it: DialEtcdAtStart), and records or checks
// the cluster's WAL namespace and stream replication.
func (s *server) startEtcd(ctx context.Context, down *teardown) error {
	cfg := s.cfg
	s.etcdEndpoints = cfg.EtcdEndpoints
	if cfg.EmbeddedEtcd() {
		dir := filepath.Join(cfg.DataDir, "etcd")
		es, err := embedetcd.Start(embedetcd.Config{
			Dir: dir, ClientURL: cfg.EmbeddedEtcdClientURL, PeerURL: cfg.EmbeddedEtcdPeerURL, Logger: s.log,
		})
		if err != nil {
			return err
		}
		down.add(func() { es.Close(); s.log.Debug("embedded etcd stopped") })
		s.etcdEndpoints = es.Endpoints()
		s.log.Info("embedded etcd started", "client_url", cfg.EmbeddedEtcdClientURL, "dir", dir)
	}
	client, err := connect.DialEtcdAtStart(ctx, s.log, s.etcdEndpoints, cfg.EtcdPrefix, 10*time.Second, cfg.Etcd)
	if err != nil {
		return err
	}
	down.add(func() { client.Close() })
	s.client = client
	s.topics = &topic.Registry{Client: client, Prefix: cfg.EtcdPrefix}
	if err := connect.ClaimNamespace(ctx, s.log, client, cfg.EtcdPrefix, s.namespace); err != nil {
		return err
	}
	return connect.ClaimReplicas(ctx, s.log, client, cfg.EtcdPrefix, cfg.WALReplicas)
}

// startWAL starts the embedded nats-server when --wal.url is empty and
// connects to the WAL (waiting while JetStream does not answer yet:
// OpenWALAtStart). A server without atomic batches is warned about.
func (s *server) startWAL(ctx context.Context, down *teardown) error {
	cfg := s.cfg
	s.walURL = cfg.WALURL
	if cfg.EmbeddedWAL() {
		host, portStr, _ := net.SplitHostPort(cfg.EmbeddedNATSAddr)
		port, err := strconv.Atoi(portStr)
		if err != nil {
			return cmdline.Usagef("--embedded.nats-addr %q: port: %v", cfg.EmbeddedNATSAddr, err)
		}
		dir := filepath.Join(cfg.DataDir, "nats")
		ns, err := embednats.Start(embednats.Config{
			Host: host, Port: port, StoreDir: dir, SyncAlways: cfg.WALSync == "always", Logger: s.quieter(),
		})
		if err != nil {
			return fmt.Errorf("embedded nats-server on %s: %w", cfg.EmbeddedNATSAddr, err)
		}
		down.add(func() { ns.Shutdown(); s.log.Debug("embedded nats-server stopped") })
		s.walURL = ns.URL()
		s.log.Info("embedded nats-server started", "url", s.walURL, "store_dir", dir, "sync", cfg.WALSync)
	}
	opener, err := connect.OpenWALAtStart(ctx, s.walURL, s.namespace, cfg.WALReplicas, s.walSec, s.log)
	if err != nil {
		return err
	}
	down.add(func() { opener.Close(); s.log.Debug("WAL connection closed") })
	s.opener = opener
	if si, ok := opener.(wal.ServerInfoReporter); ok {
		if version, atomic, known := si.ServerInfo(); known && !atomic {
			s.log.Warn("the NATS server has no atomic batches (nats-server 2.12 or newer has them): outputs are published one by one with dedupe ids, exactly once only while a failover completes within the streams' duplicate window (2 minutes); upgrade the server for exactly-once outputs regardless of time",
				"server_version", version, "url", s.walURL)
		}
	}
	return nil
}

// openSnapshots opens the snapshot store (--snapshot.store), unless none.
func (s *server) openSnapshots(ctx context.Context, down *teardown) error {
	cfg := s.cfg
	if cfg.SnapshotStore == "none" {
		return nil
	}
	dir := ""
	if cfg.SnapshotStore == "dir" {
		dir = cfg.SnapshotDir
	}
	st, closeStore, err := connect.OpenSnapshotStore(ctx, dir, s.walURL, s.namespace, cfg.WALReplicas, time.Minute, s.walSec, s.log)
	if err != nil {
		return err
	}
	down.add(closeStore)
	s.snapshots = &shard.SnapshotOptions{Store: st, Etcd: s.client}
	return nil
}

// setUpEmbeddedApps creates, on the embedded default, the topics of every
// --app and the shards of an app that has none (cluster.EnsureApp).
func (s *server) setUpEmbeddedApps(ctx context.Context, _ *teardown) error {
	cfg := s.cfg
	if !cfg.EmbeddedEtcd() || cfg.EmbeddedShards == 0 {
		return nil
	}
	for _, app := range s.embedded {
		topics, n, err := cluster.EnsureApp(ctx, s.client, cfg.EtcdPrefix, app, cfg.EmbeddedShards)
		if err != nil {
			return err
		}
		if len(topics) > 0 {
			s.log.Info("created topics", "topics", strings.Join(topics, ","), "partitions", cfg.EmbeddedShards)
		}
		if n > 0 {
			s.log.Info("created shards", "app", app.Name, "count", n)
		}
	}
	return nil
}

// quieter is the logger for the embedded nats-server: its startup banner
// and notices are info-level chatter, so it logs warnings and errors only,
// unless --log.level is debug or trace.
func (s *server) quieter() hclog.Logger {
	level := s.cfg.LogLevel
	if l := hclog.LevelFromString(level); l > hclog.Debug && l < hclog.Warn {
		level = "warn"
	}
	return cmdline.NewLogger(level, s.cfg.LogFormat, s.logOut)
}
