package memory

import (
	"context"
	"fmt"
	"sync"

	"github.com/consumerd/consumerd/wal/walimpls"
)

// opener is a connection to the store. Its acker delivers the outcomes of
// every append made through it, as a connection's reply handler would.
type opener struct {
	st   *store
	acks *acker

	mu     sync.Mutex
	closed bool
	wals   map[*wal]struct{}
}

func (o *opener) Open(ctx context.Context, opt *walimpls.OpenOption) (walimpls.WALImpls, error) {
	if opt == nil || opt.Channel == "" {
		return nil, fmt.Errorf("memory: open: empty channel name")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: open %q: %w", opt.Channel, err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil, fmt.Errorf("memory: open %q: opener: %w", opt.Channel, walimpls.ErrClosed)
	}
	c, ok := o.st.channelIf(opt.Channel, !opt.NoCreate)
	if !ok {
		return nil, fmt.Errorf("memory: open %q: %w", opt.Channel, walimpls.ErrNoChannel)
	}
	if opt.Term != 0 {
		c.mu.Lock()
		if opt.Term > c.term {
			c.term = opt.Term
		}
		c.mu.Unlock()
	}
	w := &wal{st: o.st, ch: c, term: opt.Term, closed: make(chan struct{}), scanners: make(map[*scanner]struct{}), opener: o}
	w.idle = sync.NewCond(&w.mu)
	o.wals[w] = struct{}{}
	return w, nil
}

// Close closes every WAL still open from this opener, then stops its
// acknowledgement goroutine.
func (o *opener) Close() {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return
	}
	o.closed = true
	wals := make([]*wal, 0, len(o.wals))
	for w := range o.wals {
		wals = append(wals, w)
	}
	o.mu.Unlock()
	for _, w := range wals {
		w.Close()
	}
	o.acks.stop()
}

func (o *opener) forget(w *wal) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.wals, w)
}

// RemoveChannel drops the channel from the store; WALs open on it keep the
// old channel (and fail nothing: the memory backend is for tests).
func (o *opener) RemoveChannel(ctx context.Context, channel string) error {
	o.st.mu.Lock()
	defer o.st.mu.Unlock()
	delete(o.st.channels, channel)
	return nil
}
