package memory

import (
	"context"
	"fmt"
	"sync"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// asyncReq is one queued async append.
type asyncReq struct {
	ctx context.Context
	msg message.MutableMessage
	cb  func(message.MessageID, error)
}

// asyncWAL is a wal that also implements walimpls.AsyncAppender: async
// appends are queued and stored in call order by one goroutine, which the
// WAL's Close stops.
type asyncWAL struct {
	*wal
	queue   chan asyncReq
	stopped chan struct{}

	mu      sync.Mutex     // orders sender registration against close
	senders sync.WaitGroup // AppendAsync calls that may still enqueue
}

var _ walimpls.AsyncAppender = (*asyncWAL)(nil)

func (a *asyncWAL) AppendAsync(ctx context.Context, msg message.MutableMessage, cb func(message.MessageID, error)) {
	a.mu.Lock()
	if a.isClosed() {
		a.mu.Unlock()
		cb(0, fmt.Errorf("memory: async append to %q: %w", a.ch.name, walimpls.ErrClosed))
		return
	}
	a.senders.Add(1)
	a.mu.Unlock()
	defer a.senders.Done()
	select {
	case a.queue <- asyncReq{ctx: ctx, msg: msg, cb: cb}:
	case <-ctx.Done():
		cb(0, fmt.Errorf("memory: async append to %q: %w", a.ch.name, ctx.Err()))
	case <-a.closed:
		cb(0, fmt.Errorf("memory: async append to %q: %w", a.ch.name, walimpls.ErrClosed))
	}
}

func (a *asyncWAL) run() {
	defer close(a.stopped)
	for {
		select {
		case r := <-a.queue:
			r.cb(a.wal.Append(r.ctx, r.msg))
		case <-a.closed:
			// Every sender registered before the close is seen after this
			// barrier; later ones see the close and do not enqueue.
			a.mu.Lock()
			a.mu.Unlock() //nolint:staticcheck // barrier
			a.senders.Wait()
			for {
				select {
				case r := <-a.queue:
					r.cb(0, fmt.Errorf("memory: async append to %q: %w", a.ch.name, walimpls.ErrClosed))
				default:
					return
				}
			}
		}
	}
}

// Close closes the WAL, fails queued async appends with ErrClosed and waits
// for the append goroutine to stop.
func (a *asyncWAL) Close() {
	a.wal.Close()
	<-a.stopped
}
