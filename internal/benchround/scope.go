package benchround

import (
	"os"
	"sync"
	"testing"
)

// Scope is a testing.TB for one round: the functions registered with its
// Cleanup, and the directories its TempDir makes, are released by Close, at
// the end of the round, instead of when the whole benchmark ends. A round
// that starts servers (nats-server, etcd) through helpers taking a
// testing.TB would otherwise keep every earlier round's servers running —
// their goroutines, timers and caches, their heap — through the later
// rounds' measurements. Everything else goes to the benchmark's TB.
type Scope struct {
	testing.TB

	mu       sync.Mutex
	cleanups []func()
	closed   bool
}

// NewScope returns a scope on tb. Call Close when the round ends; tb's own
// cleanup also closes it (a round that failed and stopped early).
func NewScope(tb testing.TB) *Scope {
	s := &Scope{TB: tb}
	tb.Cleanup(s.Close)
	return s
}

// Cleanup registers f to run when the scope closes, in last-in first-out
// order, as testing does; after Close it runs at the benchmark's end.
func (s *Scope) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.TB.Cleanup(f)
		return
	}
	s.cleanups = append(s.cleanups, f)
}

// TempDir returns a new directory removed when the scope closes.
func (s *Scope) TempDir() string {
	s.TB.Helper()
	d, err := os.MkdirTemp("", "benchround-")
	if err != nil {
		s.TB.Fatalf("benchround: temp dir: %v", err)
	}
	s.Cleanup(func() {
		if err := os.RemoveAll(d); err != nil {
			s.TB.Errorf("benchround: remove %s: %v", d, err)
		}
	})
	return d
}

// Close runs the registered cleanups, newest first. Later calls do nothing.
func (s *Scope) Close() {
	s.mu.Lock()
	fs := s.cleanups
	s.cleanups, s.closed = nil, true
	s.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}
