package server

import (
	"sync"
	"time"

	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/wal"
)

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

// etcdHealth is this member's etcd health; session is whether its lease is
// live.
func (s *server) etcdHealth(session bool) api.EtcdHealth {
	eh := api.EtcdHealth{Session: session}
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
func (s *server) natsHealth() api.NATSHealth {
	var nh api.NATSHealth
	if ci, ok := s.opener.(wal.ConnectionReporter); ok {
		nh.URL, nh.Connected, _ = ci.Connection()
	}
	if si, ok := s.opener.(wal.ServerInfoReporter); ok {
		nh.ServerVersion, _, _ = si.ServerInfo()
	}
	return nh
}
