package cmdline

import (
	"context"
	"time"
)

// A client command never outlives its --timeout, even when a server it
// talks to went silent: these bound its waits.

// closeGrace is how long a run past its --timeout still waits for its
// connections to close.
const closeGrace = time.Second

// WaitBy calls wait and reports whether it returned before ctx ended (and
// closeGrace more): a client command never outlives its --timeout, even when
// the server it appends to went silent and its acknowledgements wait for
// their own, longer timeout. What wait still waits for ends with the process.
func WaitBy(ctx context.Context, wait func()) bool {
	done := make(chan struct{})
	go func() { // owned by the command's process: ends when wait returns
		wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
	}
	select {
	case <-done:
		return true
	case <-time.After(closeGrace):
		return false
	}
}

// CloseBy runs close, bounded like WaitBy.
func CloseBy(ctx context.Context, close func()) { WaitBy(ctx, close) }

// DeadlineOf is ctx's deadline (a day away when it has none).
func DeadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(24 * time.Hour)
}
