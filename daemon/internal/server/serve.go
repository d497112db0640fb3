package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/internal/bytesize"
	"github.com/consumerd/consumerd/internal/gctarget"
	"github.com/consumerd/consumerd/internal/natsconn"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/rocksmem"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
)

// Process is what a member takes from its command line besides its flags.
type Process struct {
	// Embedded are the apps whose topics and shards the embedded default
	// sets up (--app).
	Embedded []shard.App
	// Apps are every app the binary registers: the member runs their shards.
	Apps map[string]shard.App
	// Log receives the logs.
	Log io.Writer
	// Signals are the shutdown requests: the first drains the member, a
	// second calls HardExit (os.Exit(1) for the process's own signals) or,
	// when HardExit is nil, stops without draining, tearing down in order.
	Signals  <-chan os.Signal
	HardExit func()
}

// server is one serve process: its backends, its HTTP server, and the current
// member session (replaced when a lease is lost and the member rejoins).
type server struct {
	cfg      Config
	embedded []shard.App // set up on the embedded default
	apps     map[string]shard.App
	log      hclog.Logger
	logOut   io.Writer

	// Set while starting (start.go).
	namespace     string // the cluster's WAL namespace
	walSec        natsconn.Security
	etcdEndpoints []string // the embedded etcd's, or --etcd.endpoints
	walURL        string   // the embedded nats-server's, or --wal.url
	client        *clientv3.Client
	topics        *topic.Registry
	opener        wal.Opener
	// snapshots configure shard snapshots (nil: --snapshot.store=none).
	snapshots *shard.SnapshotOptions
	endpoint  string
	http      *http.Client
	// instance is the data directory's instance id (datadir.go).
	instance string
	// memory is the RocksDB memory budget of the member's shard databases
	// (--rocksdb.memory), owned here across sessions.
	memory *rocksmem.Budget

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

// teardown is what a starting member must undo, undone last first.
type teardown []func()

func (t *teardown) add(f func()) { *t = append(*t, f) }

func (t teardown) run() {
	for i := len(t) - 1; i >= 0; i-- {
		t[i]()
	}
}

// Run runs a member until it drained after a signal (nil error), ctx ended
// (nil), or a fatal error: what `consumerd serve` runs. It starts in order
// (start.go): the HTTP listener and the data directory, etcd (embedded or
// not), the WAL (likewise), the snapshot store and the embedded default's
// apps; then serves HTTP and runs member sessions (loop.go) until the end,
// and tears everything down in the reverse order.
func Run(ctx context.Context, cfg Config, p Process) error {
	s := &server{cfg: cfg, embedded: p.Embedded, apps: p.Apps, logOut: p.Log,
		log: cmdline.NewLogger(cfg.LogLevel, cfg.LogFormat, p.Log)}
	s.health.started = time.Now()
	var down teardown
	defer func() { down.run() }() // down grows as Run starts things
	ln, serverTLS, err := s.prepare(&down)
	if err != nil {
		return err
	}
	// Starting waits for etcd and the WAL as long as they are not there: a
	// signal meanwhile stops the start, and serve (nothing to drain yet).
	startCtx, interrupted := whileStarting(ctx, p.Signals)
	for _, step := range []func(context.Context, *teardown) error{s.startEtcd, s.startWAL, s.openSnapshots, s.setUpEmbeddedApps} {
		if err = step(startCtx, &down); err != nil {
			break
		}
	}
	if sig := interrupted(); sig != nil {
		s.log.Info("shutdown requested while starting: exiting", "signal", fmt.Sprint(sig), "error", err)
		return nil
	}
	if err != nil {
		return err
	}
	s.serveHTTP(ln, serverTLS, &down)
	gcPercent, gcFrom := gctarget.Apply()
	// The same machine or cgroup memory --rocksdb.memory's default is a
	// quarter of: the soft limit's default is half of it.
	memLimit, memLimitFrom := gctarget.ApplyMemoryLimit(rocksmem.Available())
	memLimitText := "none"
	if memLimit != gctarget.NoLimit {
		memLimitText = bytesize.Format(uint64(memLimit))
	}
	s.log.Info("serving", "member", cfg.MemberID, "zone", cfg.Zone, "endpoint", s.endpoint,
		"apps", strings.Join(cfg.Apps, ","), "etcd", s.etcdEndpoints, "wal", s.walURL, "wal_namespace", s.namespace,
		"gc_percent", gcPercent, "gc_from", gcFrom, "mem_limit", memLimitText, "mem_limit_from", memLimitFrom,
		"rocksdb_memory", bytesize.Format(cfg.RocksDBMemory))
	return s.run(ctx, p.Signals, p.HardExit)
}

// whileStarting is ctx, cancelled by a first signal on sigs. interrupted
// stops watching and returns the signal that came, or nil; it must be called
// once, before anything else reads sigs.
func whileStarting(ctx context.Context, sigs <-chan os.Signal) (_ context.Context, interrupted func() os.Signal) {
	ctx, cancel := context.WithCancel(ctx)
	got := make(chan os.Signal, 1)
	go func() { // owned here: ends with ctx (interrupted cancels it)
		select {
		case sig := <-sigs:
			got <- sig
			cancel()
		case <-ctx.Done():
			got <- nil
		}
	}()
	return ctx, func() os.Signal {
		cancel()
		return <-got
	}
}

// prepare reads every TLS file (so a bad one is named before anything
// starts), listens on --http.addr (the advertised endpoint is the address
// actually bound) and takes the data directory.
func (s *server) prepare(down *teardown) (net.Listener, *tls.Config, error) {
	cfg := s.cfg
	var err error
	// Every stream, subject and the snapshot bucket of this cluster are in
	// its namespace: clusters under other prefixes share the NATS safely.
	if s.namespace, err = connect.WALNamespace(cfg.WALNamespace, cfg.EtcdPrefix); err != nil {
		return nil, nil, cmdline.Usage(err)
	}
	serverTLS, err := cfg.HTTP.ServerConfig()
	if err != nil {
		return nil, nil, err
	}
	// Calls to other members (forwarding, gathering, a member id's holder)
	// verify them with --http.cacert and present this member's certificate.
	if s.http, err = cfg.HTTP.Client(10 * time.Second); err != nil {
		return nil, nil, err
	}
	if serverTLS != nil && cfg.HTTP.CACert == "" {
		s.log.Warn("--http.cert is set without --http.cacert: other members' certificates are verified against the system's roots")
	}
	if s.walSec, err = cfg.WAL.NATS(); err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("--http.addr %s: %w", cfg.HTTPAddr, err)
	}
	down.add(func() { ln.Close() })
	s.endpoint = advertiseURL(cfg.HTTPAdvertise, cfg.HTTP.Scheme(), ln.Addr(), os.Hostname)
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("--data-dir %s: %w", cfg.DataDir, err)
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, nil, err
	}
	down.add(unlock)
	if s.instance, err = dataDirInstance(cfg.DataDir); err != nil {
		return nil, nil, err
	}
	// The shard databases of every session share it; closed after the
	// last session ended (teardown runs last first), when all are closed.
	if s.memory, err = rocksmem.New(cfg.RocksDBMemory); err != nil {
		return nil, nil, cmdline.Usage(fmt.Errorf("--rocksdb.memory: %w", err))
	}
	down.add(s.memory.Close)
	return ln, serverTLS, nil
}

// serveHTTP serves the member's endpoints on ln until the teardown, which
// waits up to 5 s for requests in flight.
func (s *server) serveHTTP(ln net.Listener, serverTLS *tls.Config, down *teardown) {
	hs := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: serverTLS}
	httpDone := make(chan error, 1)
	go func() { // owned here: ends with hs.Shutdown in the teardown
		if serverTLS != nil {
			httpDone <- hs.ServeTLS(ln, "", "") // the certificate is in TLSConfig
			return
		}
		httpDone <- hs.Serve(ln)
	}()
	down.add(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.http.CloseIdleConnections()
		_ = hs.Shutdown(sctx)
		<-httpDone
		s.log.Debug("HTTP server stopped")
	})
}

// fatalError ends serve instead of a rejoin: retrying cannot help.
type fatalError struct{ error }

func (e fatalError) Unwrap() error { return e.error }
