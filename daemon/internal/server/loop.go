package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/internal/retry"
)

// run runs member sessions until the member drained after a signal, ctx
// ended, or a fatal error; a lost session (its lease expired) is rejoined.
// A goroutine it owns watches sigs (drainOnSignal) and has ended when run
// returns.
func (s *server) run(ctx context.Context, sigs <-chan os.Signal, hardExit func()) error {
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	var forced atomic.Value // string: why the run was cut short
	var sigWG sync.WaitGroup
	sigWG.Add(1)
	go func() { // owned here: ends with runCtx
		defer sigWG.Done()
		s.drainOnSignal(runCtx, cancelRun, sigs, hardExit, &forced)
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
			s.log.Error("cannot join the cluster", "error", fatal.error)
			cancelRun()
			return fatal.error
		}
		if why, ok := forced.Load().(string); ok {
			s.log.Warn(why)
			return cmdline.ExitError{Code: 1, Err: errors.New(why)}
		}
		if s.lone.Load() {
			return nil
		}
		if err == nil && s.exiting.Load() {
			s.log.Info("drained: nothing assigned, exiting")
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
		s.log.Error("member session lost; rejoining", "error", err, "attempt", rejoin.Attempt()+1)
		if rejoin.Wait(runCtx, nil) != nil {
			return nil
		}
	}
}

// drainOnSignal waits for a first signal, then marks the member exiting so
// the leader moves its shards elsewhere (make-before-break); a lone member,
// with nowhere to drain to, ends the run at once. A second signal or
// --shutdown-timeout cuts the drain short: forced says why, and the run is
// cancelled (a second real signal exits the process at once: hardExit).
func (s *server) drainOnSignal(ctx context.Context, cancelRun func(), sigs <-chan os.Signal, hardExit func(), forced *atomic.Value) {
	cfg := s.cfg
	select {
	case sig := <-sigs:
		s.log.Info("shutdown requested: draining shards to other members", "signal", fmt.Sprint(sig), "timeout", cfg.ShutdownTimeout)
	case <-ctx.Done():
		return
	}
	s.exiting.Store(true)
	if sess := s.sess.Load(); sess != nil && !cluster.OthersToTakeOver(sess.member.KeySpace().Snapshot(), cfg.Zone, cfg.MemberID) {
		s.log.Info("no other member to take over the shards; exiting without draining")
		s.lone.Store(true)
		cancelRun()
		return
	}
	if sess := s.sess.Load(); sess != nil {
		if err := sess.member.SetExiting(ctx); err != nil {
			s.log.Warn("marking member exiting", "error", err)
		}
	} // else: the next session announces itself exiting (see newMember)
	timer := time.NewTimer(cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-sigs:
		forced.Store("second signal: exiting without draining")
		if hardExit != nil {
			s.log.Warn("second signal: exiting now")
			hardExit()
		}
		cancelRun()
	case <-timer.C:
		forced.Store(fmt.Sprintf("shutdown timeout %s: shards still assigned, exiting anyway", cfg.ShutdownTimeout))
		cancelRun()
	case <-ctx.Done():
	}
}
