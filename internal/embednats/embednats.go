package embednats

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats-server/v2/server"
)

// DefaultReadyTimeout bounds how long Start waits for the server to accept
// connections when Config.ReadyTimeout is zero.
const DefaultReadyTimeout = 10 * time.Second

// Config configures an embedded nats-server.
type Config struct {
	// Host is the interface to listen on; empty means 127.0.0.1.
	Host string
	// Port is the client port. Zero picks a free port (the daemon passes
	// 4222 explicitly for its default). Negative values are invalid.
	Port int
	// StoreDir is the JetStream store directory (created if missing). Required.
	StoreDir string
	// SyncAlways fsyncs every JetStream store write before it is acknowledged
	// (nats-server's sync_interval: always). False keeps the server default:
	// periodic fsync every two minutes. See the package doc for the cost.
	SyncAlways bool
	// MaxPayload overrides the server's max_payload (bytes); zero keeps the
	// nats-server default of 1 MiB.
	MaxPayload int32
	// ServerName names the server in logs and JetStream metadata; empty lets
	// nats-server generate one.
	ServerName string
	// ReadyTimeout bounds the wait for the server to accept connections; zero
	// means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Logger receives the server's log lines (named "nats"); nil discards them.
	Logger hclog.Logger
	// Cluster, when set, makes this server a member of a NATS cluster with
	// clustered JetStream (streams can then have replicas). ServerName is
	// required and must differ between members.
	Cluster *Cluster
}

// Cluster configures cluster membership.
type Cluster struct {
	// Name is the cluster name, the same on every member. Required.
	Name string
	// Host is the route listen interface; empty means Config.Host.
	Host string
	// Port is the route port. Required (> 0).
	Port int
	// Routes are the members' route URLs, e.g. nats-route://127.0.0.1:6222
	// (this server's own may be included).
	Routes []string
}

// Server is a running embedded nats-server.
type Server struct {
	srv    *server.Server
	url    string
	addr   string
	logger hclog.Logger
	once   sync.Once
}

// Start starts a nats-server with JetStream per cfg and waits until it accepts
// client connections. It fails with an error naming the address when the port
// is taken or the server does not become ready in time.
func Start(cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("embednats: StoreDir is required")
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("embednats: invalid port %d (want 0 for a free port, or 1-65535)", cfg.Port)
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	logger = logger.Named("nats")
	ready := cfg.ReadyTimeout
	if ready <= 0 {
		ready = DefaultReadyTimeout
	}
	storeDir, err := filepath.Abs(cfg.StoreDir)
	if err != nil {
		return nil, fmt.Errorf("embednats: store dir %q: %w", cfg.StoreDir, err)
	}

	port := cfg.Port
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	if port != 0 {
		// nats-server reports a taken port only through its logger (as a
		// fatal error), so probe first for a clear, immediate error.
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("embednats: cannot listen on %s (port taken by another process?): %w", addr, err)
		}
		_ = l.Close()
	} else {
		port = server.RANDOM_PORT
	}

	opts := &server.Options{
		ServerName: cfg.ServerName,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   storeDir,
		SyncAlways: cfg.SyncAlways,
		MaxPayload: cfg.MaxPayload,
		NoSigs:     true,
		Debug:      logger.IsDebug(),
		Trace:      logger.IsTrace(),
	}
	if c := cfg.Cluster; c != nil {
		if c.Name == "" || c.Port <= 0 || c.Port > 65535 || cfg.ServerName == "" {
			return nil, fmt.Errorf("embednats: cluster member on %s needs a cluster name, a route port (got %d) and a server name", addr, c.Port)
		}
		chost := c.Host
		if chost == "" {
			chost = host
		}
		opts.Cluster = server.ClusterOpts{Name: c.Name, Host: chost, Port: c.Port}
		for _, r := range c.Routes {
			u, err := url.Parse(r)
			if err != nil || u.Host == "" {
				return nil, fmt.Errorf("embednats: bad route URL %q (want nats-route://host:port): %v", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embednats: configure server on %s: %w", addr, err)
	}
	adapter := &logAdapter{log: logger}
	srv.SetLoggerV2(adapter, logger.IsDebug(), logger.IsTrace(), false)
	srv.Start()
	if !srv.ReadyForConnections(ready) {
		srv.Shutdown()
		srv.WaitForShutdown()
		if f := adapter.fatal(); f != "" {
			return nil, fmt.Errorf("embednats: server on %s failed to start: %s", addr, f)
		}
		return nil, fmt.Errorf("embednats: server on %s not ready for connections after %s", addr, ready)
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("embednats: server on %s started without JetStream (store dir %s): %s", addr, storeDir, adapter.fatal())
	}
	s := &Server{srv: srv, url: srv.ClientURL(), logger: logger}
	if a, ok := srv.Addr().(*net.TCPAddr); ok {
		s.addr = net.JoinHostPort(host, strconv.Itoa(a.Port))
	} else {
		s.addr = addr
	}
	logger.Info("embedded nats-server ready", "url", s.url, "store_dir", storeDir, "sync_always", cfg.SyncAlways)
	return s, nil
}

// URL is the client URL, e.g. nats://127.0.0.1:4222.
func (s *Server) URL() string { return s.url }

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.addr }

// Shutdown stops the server and waits until it has stopped. Safe to call more
// than once.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.logger.Info("embedded nats-server stopped", "url", s.url)
	})
}

// logAdapter forwards nats-server log calls to hclog. Fatal messages are
// logged as errors and remembered (nats-server's own logger would exit the
// process; an embedded server must never do that).
type logAdapter struct {
	log hclog.Logger
	mu  sync.Mutex
	fat string
}

func (l *logAdapter) Noticef(format string, v ...any) { l.log.Info(fmt.Sprintf(format, v...)) }
func (l *logAdapter) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *logAdapter) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *logAdapter) Debugf(format string, v ...any) {
	if l.log.IsDebug() {
		l.log.Debug(fmt.Sprintf(format, v...))
	}
}
func (l *logAdapter) Tracef(format string, v ...any) {
	if l.log.IsTrace() {
		l.log.Trace(fmt.Sprintf(format, v...))
	}
}
func (l *logAdapter) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error("fatal: " + msg)
	l.mu.Lock()
	if l.fat == "" {
		l.fat = msg
	}
	l.mu.Unlock()
}

func (l *logAdapter) fatal() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fat
}
