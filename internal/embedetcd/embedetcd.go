package embedetcd

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Config configures an embedded single-node etcd server.
type Config struct {
	// Dir is the data directory (created if missing). Required.
	Dir string
	// ClientURL is the URL clients connect to, e.g. "http://127.0.0.1:2379". Required.
	ClientURL string
	// PeerURL is the raft peer URL, e.g. "http://127.0.0.1:2380". Required.
	PeerURL string
	// Name is the etcd member name; "consumerd" when empty.
	Name string
	// Logger receives etcd's warnings and errors (its info/debug output is
	// dropped). Nil discards everything.
	Logger hclog.Logger
	// StartTimeout bounds the wait for the server to become ready; 30s when zero.
	StartTimeout time.Duration
	// UnsafeNoFsync disables fsync (tests only: data is lost on a crash).
	UnsafeNoFsync bool
	// SnapshotCount is the number of committed entries between raft snapshots;
	// etcd's default when zero. Tests use a small value to keep memory low.
	SnapshotCount uint64
}

// Server is a running embedded etcd server.
type Server struct {
	etcd      *embed.Etcd
	endpoints []string
	// closing silences the logger during Close: etcd reports its own
	// listeners closing as errors ("use of closed network connection").
	closing   *atomic.Bool
	closeOnce sync.Once
}

// Start starts an embedded etcd server and waits until it serves clients.
// It fails with an error naming the address when a port is already taken,
// and when the server does not become ready within Config.StartTimeout.
func Start(cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("embedded etcd: data dir is empty")
	}
	curl, err := parseURL("client", cfg.ClientURL)
	if err != nil {
		return nil, err
	}
	purl, err := parseURL("peer", cfg.PeerURL)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd: creating data dir %s: %w", cfg.Dir, err)
	}
	name := cfg.Name
	if name == "" {
		name = "consumerd"
	}
	timeout := cfg.StartTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}

	ec := embed.NewConfig()
	ec.Name = name
	ec.Dir = filepath.Clean(cfg.Dir)
	ec.ListenClientUrls = []url.URL{*curl}
	ec.AdvertiseClientUrls = []url.URL{*curl}
	ec.ListenPeerUrls = []url.URL{*purl}
	ec.AdvertisePeerUrls = []url.URL{*purl}
	ec.InitialCluster = ec.InitialClusterFromName(name)
	ec.LogLevel = "warn"
	closing := new(atomic.Bool)
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(newHclogCore(cfg.Logger, closing)))
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	// NewConfig leaves this zero, which makes etcd log every request as
	// "expensive" at warn level; use etcd's own default (300ms).
	ec.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	if cfg.SnapshotCount > 0 {
		ec.SnapshotCount = cfg.SnapshotCount
		ec.SnapshotCatchUpEntries = cfg.SnapshotCount
	}

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: starting (client %s, peer %s, dir %s): %w",
			cfg.ClientURL, cfg.PeerURL, cfg.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: serving on %s: %w", cfg.ClientURL, err)
	case <-time.After(timeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("embedded etcd: not ready on %s within %s", cfg.ClientURL, timeout)
	}
	return &Server{etcd: e, endpoints: []string{curl.String()}, closing: closing}, nil
}

func parseURL(what, s string) (*url.URL, error) {
	if s == "" {
		return nil, fmt.Errorf("embedded etcd: %s URL is empty", what)
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: %s URL %q: %w", what, s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("embedded etcd: %s URL %q: scheme must be http or https", what, s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("embedded etcd: %s URL %q: no host:port", what, s)
	}
	return u, nil
}

// Endpoints returns the client endpoints to pass to clientv3.Config.
func (s *Server) Endpoints() []string { return append([]string(nil), s.endpoints...) }

// Err reports fatal serving errors after Start returned.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the server and waits for it to release its ports and files.
// Client streams still open are given etcd's request timeout (about 5s) to
// finish, so close clients first. It is safe to call more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		s.etcd.Close()
		<-s.etcd.Server.StopNotify()
	})
}

// hclogCore is a zapcore.Core writing warnings and errors to an hclog.Logger.
type hclogCore struct {
	log     hclog.Logger
	fields  []zapcore.Field
	closing *atomic.Bool
}

func newHclogCore(l hclog.Logger, closing *atomic.Bool) zapcore.Core {
	if l == nil {
		return zapcore.NewNopCore()
	}
	return &hclogCore{log: l.Named("etcd"), closing: closing}
}

func (c *hclogCore) Enabled(l zapcore.Level) bool { return l >= zapcore.WarnLevel }

func (c *hclogCore) With(fs []zapcore.Field) zapcore.Core {
	return &hclogCore{log: c.log, fields: append(append([]zapcore.Field(nil), c.fields...), fs...), closing: c.closing}
}

func (c *hclogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *hclogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	if c.closing.Load() {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	args := make([]any, 0, 2*len(enc.Fields))
	for k, v := range enc.Fields {
		args = append(args, k, v)
	}
	if e.Level >= zapcore.ErrorLevel {
		c.log.Error(e.Message, args...)
	} else {
		c.log.Warn(e.Message, args...)
	}
	return nil
}

func (c *hclogCore) Sync() error { return nil }
