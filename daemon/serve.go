package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/internal/embedetcd"
	"github.com/consumerd/consumerd/internal/embednats"
	"github.com/consumerd/consumerd/internal/gctarget"
	"github.com/consumerd/consumerd/internal/retry"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/wal"
)

func newServeCommand(opts Options) *cobra.Command {
	var cfg serveConfig
	var defaultApps []string
	if len(opts.Apps) > 0 {
		defaultApps = opts.appNamesInOrder()
	}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a member: take shard assignments from etcd and run them",
		Long: `serve runs one consumerd member. With no --etcd.endpoints it starts an embedded
etcd (data in <data-dir>/etcd); with no --wal.url an embedded nats-server with
JetStream (store in <data-dir>/nats). On that embedded default it creates
the topics of every --app (default: every app the binary knows), with
--embedded.shards partitions each, and one shard per partition of each
app that has none, so a lone 'consumerd serve' is a working one-member cluster.

On SIGTERM or SIGINT the member marks itself exiting; the allocator leader moves
its shards to other members (make-before-break) and serve exits 0 once it holds
nothing, or 1 after --shutdown-timeout. A second signal exits at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			var apps []shard.App
			for _, name := range cfg.Apps {
				app, err := opts.app(name)
				if err != nil {
					return usageError{fmt.Errorf("--app: %w", err)}
				}
				apps = append(apps, app)
			}
			sigs, stop := opts.signals()
			defer stop()
			var hardExit func()
			if opts.Signals == nil { // real signals: a second one ends the process at once
				hardExit = func() { os.Exit(1) }
			}
			return serve(cmd.Context(), cfg, apps, opts.appMap(), opts.Stderr, sigs, hardExit)
		},
	}
	cfg.bindFlags(cmd.Flags(), defaultApps)
	return cmd
}

// server is one serve process: its backends, its HTTP server, and the current
// member session (replaced when a lease is lost and the member rejoins).
type server struct {
	cfg      serveConfig
	embedded []shard.App // set up on the embedded default
	apps     map[string]shard.App
	log      hclog.Logger
	client   *clientv3.Client
	opener   wal.Opener
	// snapshots configure shard snapshots (nil: --snapshot.store=none).
	snapshots *shard.SnapshotOptions
	endpoint  string
	http      *http.Client
	// instance is the data directory's instance id (datadir.go).
	instance string

	sess    atomic.Pointer[session]
	exiting atomic.Bool
	lone    atomic.Bool // exiting without a drain: no other member
	// health is what /v1/status reports of the backends (health.go).
	health health
}

// session is one member incarnation: a lease and its shard service. Query
// routing reads the member's KeySpace mirror directly (shard.PrimaryOf).
type session struct {
	member *allocator.Member
	svc    *shard.Service
}

// serve runs a member until it drained after a signal on sigs (nil error),
// ctx is cancelled (nil), or a fatal error. It is what `consumerd serve`
// runs; out receives the logs.
//
// A first signal on sigs drains the member; a second one calls hardExit
// (the command passes os.Exit(1) for real signals), or, when it is nil,
// stops without draining but still tears down in order.
func serve(ctx context.Context, cfg serveConfig, embedded []shard.App, apps map[string]shard.App, out interface{ Write([]byte) (int, error) }, sigs <-chan os.Signal, hardExit func()) error {
	log := newLogger(cfg.LogLevel, cfg.LogFormat, out)
	s := &server{cfg: cfg, embedded: embedded, apps: apps, log: log}
	s.health.started = time.Now()
	// Every stream, subject and the snapshot bucket of this cluster are in
	// its namespace: clusters under other prefixes share the NATS safely.
	namespace, err := walNamespace(cfg.WALNamespace, cfg.EtcdPrefix)
	if err != nil {
		return usageError{err}
	}
	// TLS and credentials (tls.go): every file is read now, so a bad one
	// is named before anything starts.
	serverTLS, err := cfg.HTTP.serverConfig()
	if err != nil {
		return err
	}
	// Calls to other members (forwarding, gathering, a member id's holder)
	// verify them with --http.cacert and present this member's certificate.
	if s.http, err = cfg.HTTP.client(10 * time.Second); err != nil {
		return err
	}
	if serverTLS != nil && cfg.HTTP.CACert == "" {
		log.Warn("--http.cert is set without --http.cacert: other members' certificates are verified against the system's roots")
	}
	walSec, err := cfg.WAL.natsSecurity()
	if err != nil {
		return err
	}

	// Listen first: the advertised endpoint is the address actually bound.
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("--http.addr %s: %w", cfg.HTTPAddr, err)
	}
	defer ln.Close()
	s.endpoint = advertiseURL(cfg.HTTPAdvertise, cfg.HTTP.scheme(), ln.Addr(), os.Hostname)

	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("--data-dir %s: %w", cfg.DataDir, err)
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer unlock()
	if s.instance, err = dataDirInstance(cfg.DataDir); err != nil {
		return err
	}

	// Coordination: etcd.
	endpoints := cfg.EtcdEndpoints
	if cfg.EmbeddedEtcd() {
		dir := filepath.Join(cfg.DataDir, "etcd")
		es, err := embedetcd.Start(embedetcd.Config{
			Dir: dir, ClientURL: cfg.EmbeddedEtcdClientURL, PeerURL: cfg.EmbeddedEtcdPeerURL, Logger: log,
		})
		if err != nil {
			return err
		}
		defer func() { es.Close(); log.Debug("embedded etcd stopped") }()
		endpoints = es.Endpoints()
		log.Info("embedded etcd started", "client_url", cfg.EmbeddedEtcdClientURL, "dir", dir)
	}
	client, err := dialEtcd(ctx, log, endpoints, cfg.EtcdPrefix, 10*time.Second, cfg.Etcd, false)
	if err != nil {
		return err
	}
	defer client.Close()
	s.client = client
	if err := claimNamespace(ctx, log, client, cfg.EtcdPrefix, namespace); err != nil {
		return err
	}
	if err := claimReplicas(ctx, log, client, cfg.EtcdPrefix, cfg.WALReplicas); err != nil {
		return err
	}

	// WAL: NATS JetStream.
	walURL := cfg.WALURL
	if cfg.EmbeddedWAL() {
		host, portStr, _ := net.SplitHostPort(cfg.EmbeddedNATSAddr)
		port, err := strconv.Atoi(portStr)
		if err != nil {
			return usagef("--embedded.nats-addr %q: port: %v", cfg.EmbeddedNATSAddr, err)
		}
		dir := filepath.Join(cfg.DataDir, "nats")
		ns, err := embednats.Start(embednats.Config{
			Host: host, Port: port, StoreDir: dir, SyncAlways: cfg.WALSync == "always", Logger: quieter(cfg, out),
		})
		if err != nil {
			return fmt.Errorf("embedded nats-server on %s: %w", cfg.EmbeddedNATSAddr, err)
		}
		defer func() { ns.Shutdown(); log.Debug("embedded nats-server stopped") }()
		walURL = ns.URL()
		log.Info("embedded nats-server started", "url", walURL, "store_dir", dir, "sync", cfg.WALSync)
	}
	opener, err := openWALAtStart(ctx, walURL, namespace, cfg.WALReplicas, walSec, log)
	if err != nil {
		return err
	}
	defer func() { opener.Close(); log.Debug("WAL connection closed") }()
	s.opener = opener
	if si, ok := opener.(interface {
		ServerInfo() (string, bool, bool)
	}); ok {
		if version, atomic, known := si.ServerInfo(); known && !atomic {
			log.Warn("the NATS server has no atomic batches (nats-server 2.12 or newer has them): outputs are published one by one with dedupe ids, exactly once only while a failover completes within the streams' duplicate window (2 minutes); upgrade the server for exactly-once outputs regardless of time",
				"server_version", version, "url", walURL)
		}
	}
	if cfg.SnapshotStore != "none" {
		dir := ""
		if cfg.SnapshotStore == "dir" {
			dir = cfg.SnapshotDir
		}
		st, closeStore, err := openSnapshotStore(ctx, dir, walURL, namespace, cfg.WALReplicas, time.Minute, walSec, log)
		if err != nil {
			return err
		}
		defer closeStore()
		s.snapshots = snapshotOptions(st, client)
	}

	if cfg.EmbeddedEtcd() && cfg.EmbeddedShards > 0 {
		for _, app := range embedded {
			topics, n, err := ensureApp(ctx, client, cfg.EtcdPrefix, app, cfg.EmbeddedShards)
			if err != nil {
				return err
			}
			if len(topics) > 0 {
				log.Info("created topics", "topics", strings.Join(topics, ","), "partitions", cfg.EmbeddedShards)
			}
			if n > 0 {
				log.Info("created shards", "app", app.Name, "count", n)
			}
		}
	}

	// HTTP.
	hs := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: serverTLS}
	httpDone := make(chan error, 1)
	go func() { // owned here: ends with hs.Shutdown below
		if serverTLS != nil {
			httpDone <- hs.ServeTLS(ln, "", "") // the certificate is in TLSConfig
			return
		}
		httpDone <- hs.Serve(ln)
	}()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.http.CloseIdleConnections()
		_ = hs.Shutdown(sctx)
		<-httpDone
		log.Debug("HTTP server stopped")
	}()
	gcPercent, gcFrom := gctarget.Apply()
	log.Info("serving", "member", cfg.MemberID, "zone", cfg.Zone, "endpoint", s.endpoint,
		"apps", strings.Join(cfg.Apps, ","), "etcd", endpoints, "wal", walURL, "wal_namespace", namespace,
		"gc_percent", gcPercent, "gc_from", gcFrom)

	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	var forced atomic.Value // string: why the run was cut short
	var sigWG sync.WaitGroup
	sigWG.Add(1)
	go func() {
		defer sigWG.Done()
		select {
		case sig := <-sigs:
			log.Info("shutdown requested: draining shards to other members", "signal", fmt.Sprint(sig), "timeout", cfg.ShutdownTimeout)
		case <-runCtx.Done():
			return
		}
		s.exiting.Store(true)
		if sess := s.sess.Load(); sess != nil && !othersToTakeOver(sess.member.KeySpace().Snapshot(), cfg.Zone, cfg.MemberID) {
			log.Info("no other member to take over the shards; exiting without draining")
			s.lone.Store(true)
			cancelRun()
			return
		}
		if sess := s.sess.Load(); sess != nil {
			if err := sess.member.SetExiting(runCtx); err != nil {
				log.Warn("marking member exiting", "error", err)
			}
		} // else: the next session announces itself exiting (see newMember)
		timer := time.NewTimer(cfg.ShutdownTimeout)
		defer timer.Stop()
		select {
		case <-sigs:
			forced.Store("second signal: exiting without draining")
			if hardExit != nil {
				log.Warn("second signal: exiting now")
				hardExit()
			}
			cancelRun()
		case <-timer.C:
			forced.Store(fmt.Sprintf("shutdown timeout %s: shards still assigned, exiting anyway", cfg.ShutdownTimeout))
			cancelRun()
		case <-runCtx.Done():
		}
	}()
	defer sigWG.Wait()

	// A lost session is retried with the one retry policy: 1 s doubling to
	// 10 s, with jitter (many members losing etcd at once do not rejoin in
	// lockstep).
	rejoin := retry.Policy{Initial: time.Second, Max: 10 * time.Second}.Start()
	for {
		err := s.runSession(runCtx)
		var fatal fatalError
		if errors.As(err, &fatal) {
			log.Error("cannot join the cluster", "error", fatal.error)
			cancelRun()
			return fatal.error
		}
		if why, ok := forced.Load().(string); ok {
			log.Warn(why)
			return exitCodeError{code: 1, err: errors.New(why)}
		}
		if s.lone.Load() {
			return nil
		}
		if err == nil && s.exiting.Load() {
			log.Info("drained: nothing assigned, exiting")
			cancelRun()
			return nil
		}
		if runCtx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("member session ended")
		}
		s.health.sessionLost(err, time.Now())
		log.Error("member session lost; rejoining", "error", err, "attempt", rejoin.Attempt()+1)
		if rejoin.Wait(runCtx, nil) != nil {
			return nil
		}
	}
}

// quieter is the logger for the embedded nats-server: its startup banner
// and notices are info-level chatter, so it logs warnings and errors only,
// unless --log.level is debug or trace.
func quieter(cfg serveConfig, out interface{ Write([]byte) (int, error) }) hclog.Logger {
	level := cfg.LogLevel
	if l := hclog.LevelFromString(level); l > hclog.Debug && l < hclog.Warn {
		level = "warn"
	}
	return newLogger(level, cfg.LogFormat, out)
}

// othersToTakeOver reports whether a member other than zone/id, and not
// exiting, is in the cluster (a lone member's drain could never finish).
func othersToTakeOver(snap allocator.Snapshot, zone, id string) bool {
	for _, m := range snap.Members {
		if (m.Zone != zone || m.ID != id) && !m.Spec.Exiting {
			return true
		}
	}
	return false
}

// runSession joins the cluster as a member, runs the shard service until the
// member session ends, and tears it down. It returns nil when the member
// drained after SetExiting, the member's error when its lease was lost, and
// ctx's error when ctx ended.
func (s *server) runSession(ctx context.Context) error {
	member, err := s.newMember(ctx)
	if err != nil {
		return err
	}
	defer member.Close()
	metricSessions.Inc()
	svc := shard.NewService(shard.Config{
		Member:  member,
		Opener:  s.opener,
		DataDir: s.cfg.DataDir, // databases at <data-dir>/shards/<shard>/
		Apps:    s.apps,
		Topics:  shard.EtcdTopics(s.client, s.cfg.EtcdPrefix),
		Logger:  s.log,
		// Snapshots bound recovery: restore, snapshot, truncate the log.
		Snapshots: s.snapshots,
		// Terms stay above every term a recovery log has seen, also when
		// etcd was rebuilt from empty.
		Terms: &allocator.Terms{Client: s.client, Prefix: s.cfg.EtcdPrefix},
	})
	sess := &session{member: member, svc: svc}
	s.sess.Store(sess)
	defer s.sess.CompareAndSwap(sess, nil)
	if s.exiting.Load() {
		if err := member.SetExiting(ctx); err != nil {
			s.log.Warn("marking member exiting", "error", err)
		}
	}

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	svcDone := make(chan error, 1)
	go func() { svcDone <- svc.Run(sctx) }() // owned here: ends with sctx
	memberDone := make(chan error, 1)
	go func() { memberDone <- member.Run(sctx) }() // owned here: ends with sctx or the lease
	watchDone := make(chan struct{})
	go func() { // owned here: ends with sctx
		defer close(watchDone)
		s.watchUnread(sctx, member)
	}()
	defer func() { cancel(); <-watchDone }()

	var memberErr, svcErr error
	select {
	case memberErr = <-memberDone:
		cancel()
		svcErr = <-svcDone
	case svcErr = <-svcDone:
		// The service must run as long as the member holds assignments:
		// end the session (its lease is revoked by Close) and rejoin.
		cancel()
		memberErr = <-memberDone
		if svcErr == nil && ctx.Err() == nil {
			svcErr = errors.New("shard service stopped")
		}
		if svcErr != nil && ctx.Err() == nil {
			return fmt.Errorf("shard service: %w", svcErr)
		}
	}
	if svcErr != nil && !errors.Is(svcErr, context.Canceled) && ctx.Err() == nil {
		s.log.Warn("shard service stopped", "error", svcErr)
	}
	if memberErr != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return memberErr
}

// newMember announces this member. Its own previous incarnation's key is
// reclaimed by NewMember (same instance id); a key of another instance is
// waited out while its lease runs down (a dead process), and a fatalError
// once the lease is seen renewed (a live process with the same id).
func (s *server) newMember(ctx context.Context) (*allocator.Member, error) {
	cfg := allocator.Config{
		Client:   s.client,
		Prefix:   s.cfg.EtcdPrefix,
		Zone:     s.cfg.Zone,
		MemberID: s.cfg.MemberID,
		LeaseTTL: s.cfg.LeaseTTL,
		Spec: allocator.MemberSpec{
			Endpoint:  s.endpoint,
			ItemLimit: s.cfg.Limit,
			Exiting:   s.exiting.Load(),
			Version:   version,
			Instance:  s.instance,
		},
		DecodeItem: shard.DecodeSpec,
		Logger:     s.log,
	}
	wait := retry.Policy{Initial: 100 * time.Millisecond, Max: 500 * time.Millisecond}.Start()
	var holder *holderWatch
	for {
		m, err := allocator.NewMember(ctx, cfg)
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, allocator.ErrMemberExists) {
			return nil, fmt.Errorf("joining as member %s/%s: %w", s.cfg.Zone, s.cfg.MemberID, err)
		}
		// Another instance holds the key (a previous incarnation from this
		// data directory was reclaimed by NewMember). It is either a live
		// process, renewing its lease, or a dead one whose lease runs out:
		// watch the lease to tell which.
		if holder == nil {
			holder = &holderWatch{}
			s.log.Warn("member id held by another instance; checking whether it is alive", "member", s.cfg.MemberID, "zone", s.cfg.Zone, "error", err)
		}
		if live, why := holder.check(ctx, s.client, s.http, allocator.MemberKey(s.cfg.EtcdPrefix, s.cfg.Zone, s.cfg.MemberID), s.cfg.Zone, s.cfg.MemberID); live {
			return nil, fatalError{fmt.Errorf("member id %q in zone %q is held by a live process (%s), so this one cannot join: give each member its own --member.id, or stop the other one (%w)",
				s.cfg.MemberID, s.cfg.Zone, why, err)}
		}
		if err := wait.Wait(ctx, nil); err != nil {
			return nil, err
		}
	}
}

// fatalError ends serve instead of a rejoin: retrying cannot help.
type fatalError struct{ error }

func (e fatalError) Unwrap() error { return e.error }

// holderWatch tells a live holder of a member key from a dead one: a live
// process answers /v1/status at its endpoint as that member, and renews its
// lease (the remaining TTL goes up); a dead one's lease runs down until etcd
// deletes the key.
type holderWatch struct {
	lease int64
	ttl   int64
}

// check reports whether the key's holder is alive, with why: it answers as
// zone/id at its endpoint, or its lease's remaining TTL went up between two
// checks of the same lease.
func (h *holderWatch) check(ctx context.Context, cli *clientv3.Client, hc *http.Client, key, zone, id string) (live bool, why string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
		return false, ""
	}
	var spec allocator.MemberSpec
	if json.Unmarshal(resp.Kvs[0].Value, &spec) == nil && spec.Endpoint != "" {
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := fetchStatus(sctx, hc, spec.Endpoint)
		scancel()
		if err == nil && st.Member == id && st.Zone == zone && st.Session {
			return true, "it answers at " + spec.Endpoint
		}
	}
	lease := resp.Kvs[0].Lease
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(lease))
	if err != nil || ttl.TTL <= 0 {
		return false, ""
	}
	renewed := h.lease == lease && ttl.TTL > h.ttl
	h.lease, h.ttl = lease, ttl.TTL
	if !renewed {
		return false, ""
	}
	return true, fmt.Sprintf("its lease %x was just renewed", lease)
}

// unreadCheckInterval is how often the leader looks for topic partitions no
// shard reads.
const unreadCheckInterval = 30 * time.Second

// watchUnread logs, on the leader, a WARN naming every topic partition that
// no shard reads (messages published there are never consumed), at start and
// whenever the set has changed at a check, until ctx ends.
func (s *server) watchUnread(ctx context.Context, member *allocator.Member) {
	t := time.NewTicker(unreadCheckInterval)
	defer t.Stop()
	last := ""
	for {
		ks := member.KeySpace()
		if ks.Leader() == member.Zone()+"/"+member.ID() {
			if ts, err := loadTopics(ctx, s.client, s.cfg.EtcdPrefix); err != nil {
				if ctx.Err() == nil {
					s.log.Debug("checking for unread partitions", "error", err)
				}
			} else {
				var b strings.Builder
				warnUnread(&b, ts, shard.Specs(ks.Snapshot()))
				if now := b.String(); now != last {
					for _, line := range strings.Split(strings.TrimSpace(now), "\n") {
						if line != "" {
							s.log.Warn(strings.TrimPrefix(line, "WARNING: "))
						}
					}
					last = now
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
