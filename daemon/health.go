package daemon

import (
	"sync"
	"time"
)

// EtcdHealth is the "etcd" object of /v1/status: the member's etcd session
// and client connection.
type EtcdHealth struct {
	// Session says the member holds a live etcd lease (as
	// StatusResponse.Session).
	Session bool `json:"session"`
	// Connection is the state of the etcd client's gRPC connection: IDLE,
	// CONNECTING, READY, TRANSIENT_FAILURE or SHUTDOWN ("" when unknown).
	Connection string `json:"connection,omitempty"`
	// LastError is why the member's last session ended (a lost lease, an
	// unreachable etcd), at LastErrorAt; absent when none ended since
	// serve started.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
}

// NATSHealth is the "nats" object of /v1/status: the WAL's connection.
type NATSHealth struct {
	// URL is the server the connection is on (password redacted), absent
	// while disconnected.
	URL string `json:"url,omitempty"`
	// Connected says the connection is up now.
	Connected bool `json:"connected"`
	// ServerVersion is the NATS server's version.
	ServerVersion string `json:"server_version,omitempty"`
}

// health is what a serve process records about itself for /v1/status and
// the status page. The zero value is ready to use; serve sets started.
type health struct {
	started time.Time

	mu        sync.Mutex
	etcdErr   string
	etcdErrAt time.Time
}

// sessionLost records why a member session ended, at at.
func (h *health) sessionLost(err error, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.etcdErr, h.etcdErrAt = err.Error(), at
}

// uptime is the time since serve started (0 before).
func (h *health) uptime(now time.Time) time.Duration {
	if h.started.IsZero() {
		return 0
	}
	return now.Sub(h.started)
}

// statusVersion is the version /v1/status reports: the main module's
// version (version.go), as the member spec announces it; statusBuild is
// the whole build line `consumerd --version` prints.
func statusVersion() string { return build.Version }

func statusBuild() string { return build.String() }

// etcdHealth is this member's etcd health; session is whether its lease is
// live.
func (s *server) etcdHealth(session bool) EtcdHealth {
	eh := EtcdHealth{Session: session}
	if s.client != nil {
		if cc := s.client.ActiveConnection(); cc != nil {
			eh.Connection = cc.GetState().String()
		}
	}
	s.health.mu.Lock()
	eh.LastError, eh.LastErrorAt = s.health.etcdErr, s.health.etcdErrAt
	s.health.mu.Unlock()
	return eh
}

// natsHealth is the WAL connection's health, as far as the backend says
// (wal.Opener's optional Connection and ServerInfo).
func (s *server) natsHealth() NATSHealth {
	var nh NATSHealth
	if ci, ok := s.opener.(interface {
		Connection() (string, bool, bool)
	}); ok {
		nh.URL, nh.Connected, _ = ci.Connection()
	}
	if si, ok := s.opener.(interface {
		ServerInfo() (string, bool, bool)
	}); ok {
		nh.ServerVersion, _, _ = si.ServerInfo()
	}
	return nh
}
