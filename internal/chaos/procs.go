package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// service is one long-running process of a host (an etcd member, a
// nats-server, a consumerd member) that the nemesis kills, stops and
// restarts. Each start appends to the same log file.
type service struct {
	name string // e1, n2, m3
	host string
	bin  string
	args []string
	log  string

	mu      sync.Mutex
	pid     int
	done    chan struct{} // closed when the current process exits
	exitErr error
	stopped bool // SIGSTOPped
}

// start launches the service in its host's namespace. The child dies with
// the harness (PR_SET_PDEATHSIG), so an interrupted run leaves no process.
func (s *service) start(n *network) error {
	f, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: log file: %w", s.name, err)
	}
	fmt.Fprintf(f, "=== chaos: start %s at %s\n", s.name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := n.command(context.Background(), s.host, s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: starting %s: %w", s.name, s.bin, err)
	}
	done := make(chan struct{})
	s.mu.Lock()
	s.pid, s.done, s.stopped = cmd.Process.Pid, done, false
	s.mu.Unlock()
	go func() { // owned by the service: ends when the process exits
		err := cmd.Wait()
		f.Close()
		s.mu.Lock()
		s.exitErr = err
		s.mu.Unlock()
		close(done)
	}()
	return nil
}

// running reports whether the current process has not exited.
func (s *service) running() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// signal sends sig to the running process.
func (s *service) signal(sig syscall.Signal) error {
	s.mu.Lock()
	pid := s.pid
	if sig == syscall.SIGSTOP {
		s.stopped = true
	}
	if sig == syscall.SIGCONT {
		s.stopped = false
	}
	s.mu.Unlock()
	if pid == 0 {
		return fmt.Errorf("%s: not started", s.name)
	}
	return syscall.Kill(pid, sig)
}

// wait waits up to d for the current process to exit.
func (s *service) wait(d time.Duration) error {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-time.After(d):
		return fmt.Errorf("%s did not exit within %s", s.name, d)
	}
}

// kill SIGKILLs the process (continuing it first if stopped) and waits for
// it to exit.
func (s *service) kill() {
	if !s.running() {
		return
	}
	_ = s.signal(syscall.SIGKILL)
	_ = s.signal(syscall.SIGCONT)
	_ = s.wait(30 * time.Second)
}

// exitState says how the last process ended, for reports.
func (s *service) exitState() string {
	if s.running() {
		return "running"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exitErr == nil {
		return "exited 0"
	}
	return s.exitErr.Error()
}

func killPid(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// logPath is the log file of service name under dir.
func logPath(dir, name string) string { return filepath.Join(dir, name+".log") }
