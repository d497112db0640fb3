package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// errPipelineBroken fails a fenced append handed in while an earlier append
// of the same WAL failed and outcomes are still on their way: storing it
// would put it before the failed one's retry. It is retryable: the adaptor
// re-sends it once every outcome is in.
var errPipelineBroken = errors.New("memory: an earlier append of this fenced WAL failed; not stored until every outcome in flight is reported")

// wal is one open channel.
type wal struct {
	st     *store
	ch     *channel
	term   uint64
	opener *opener

	closeOnce sync.Once
	closed    chan struct{}

	mu       sync.Mutex
	idle     *sync.Cond // signalled when open falls to 0
	open     int        // appends whose callback has not returned yet (Close waits)
	inflight int        // appends whose outcome was not reported yet
	broken   bool       // fenced WAL: an append failed; see errPipelineBroken
	scanners map[*scanner]struct{}
}

var _ walimpls.AsyncAppender = (*wal)(nil)

func (w *wal) WALName() string { return Name }
func (w *wal) Channel() string { return w.ch.name }

func (w *wal) isClosed() bool {
	select {
	case <-w.closed:
		return true
	default:
		return false
	}
}

// Append is AppendAsync and a wait for its outcome.
func (w *wal) Append(ctx context.Context, msg message.MutableMessage) (message.MessageID, error) {
	type result struct {
		id  message.MessageID
		err error
	}
	ch := make(chan result, 1)
	w.AppendAsync(ctx, msg, func(id message.MessageID, err error) { ch <- result{id, err} })
	r := <-ch // the acker always reports, also after Close
	return r.id, r.err
}

// AppendAsync stores msg on the calling goroutine (so one goroutine's
// appends are stored in call order) and reports the outcome from the
// opener's acknowledgement goroutine. A fenced WAL (term > 0) keeps its
// stored appends a prefix of its calls: after a failure, appends handed in
// before every outcome was reported fail with a retryable error, unstored
// (as JetStream's chained appends do).
func (w *wal) AppendAsync(ctx context.Context, msg message.MutableMessage, cb func(message.MessageID, error)) {
	w.mu.Lock()
	if w.isClosed() {
		w.mu.Unlock()
		cb(0, fmt.Errorf("memory: append to %q: %w", w.ch.name, walimpls.ErrClosed))
		return
	}
	w.open++
	w.inflight++
	broken := w.broken && w.inflight > 1
	if w.broken && !broken {
		w.broken = false // every earlier outcome is in: the caller re-sends in order
	}
	w.mu.Unlock()
	o := outcome{w: w, msg: &msg, cb: cb}
	if broken {
		o.err = fmt.Errorf("memory: append to %q: %w", w.ch.name, errPipelineBroken)
	} else if o.stored, o.id, o.err = w.store(ctx, &msg); o.err != nil {
		w.setBroken()
	}
	w.opener.acks.push(o)
}

// store runs the BeforeStore hook and stores msg.
func (w *wal) store(ctx context.Context, msg *message.MutableMessage) (stored bool, id message.MessageID, err error) {
	if err := ctx.Err(); err != nil {
		return false, 0, fmt.Errorf("memory: append to %q: %w", w.ch.name, err)
	}
	if hook := w.st.appendHook(); hook != nil {
		if err := hook(w.ch.name, msg, BeforeStore); err != nil {
			return false, 0, fmt.Errorf("memory: append to %q: %w", w.ch.name, err)
		}
		if w.isClosed() {
			return false, 0, fmt.Errorf("memory: append to %q: %w", w.ch.name, walimpls.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			return false, 0, fmt.Errorf("memory: append to %q: %w", w.ch.name, err)
		}
	}
	if err := w.CheckMessage(msg); err != nil {
		return false, 0, err
	}
	id, err = w.ch.store(w.term, msg)
	if err != nil {
		return false, 0, err
	}
	return true, id, nil
}

// setBroken marks a fenced WAL's pipeline broken (see errPipelineBroken):
// any failure does, so that no later append is stored before it.
func (w *wal) setBroken() {
	if w.term == 0 {
		return
	}
	w.mu.Lock()
	w.broken = true
	w.mu.Unlock()
}

// settled records that an append's outcome is being reported; a failed one
// breaks a fenced WAL's pipeline (a lost acknowledgement too: the caller
// retries it, and must not get later appends stored first).
func (w *wal) settled(err error) {
	w.mu.Lock()
	w.inflight--
	if err != nil && w.term > 0 {
		w.broken = true
	}
	w.mu.Unlock()
}

// done records that an append's callback returned.
func (w *wal) done() {
	w.mu.Lock()
	w.open--
	if w.open == 0 {
		w.idle.Broadcast()
	}
	w.mu.Unlock()
}

func (w *wal) LastID(ctx context.Context) (message.MessageID, error) {
	if w.isClosed() {
		return 0, fmt.Errorf("memory: last id of %q: %w", w.ch.name, walimpls.ErrClosed)
	}
	w.ch.mu.Lock()
	defer w.ch.mu.Unlock()
	return w.ch.lastID, nil
}

// Bounds implements walimpls.WALImpls.
func (w *wal) Bounds(ctx context.Context) (walimpls.Bounds, error) {
	if w.isClosed() {
		return walimpls.Bounds{}, fmt.Errorf("memory: bounds of %q: %w", w.ch.name, walimpls.ErrClosed)
	}
	c := w.ch
	c.mu.Lock()
	defer c.mu.Unlock()
	b := walimpls.Bounds{Incarnation: c.incarnation, First: c.lastID + 1, Last: c.lastID}
	if len(c.msgs) > 0 {
		b.First = c.msgs[0].ID
	}
	return b, nil
}

func (w *wal) Truncate(ctx context.Context, id message.MessageID) error {
	if w.isClosed() {
		return fmt.Errorf("memory: truncate %q: %w", w.ch.name, walimpls.ErrClosed)
	}
	c := w.ch
	c.mu.Lock()
	defer c.mu.Unlock()
	// Truncating past the end removes everything there is: the first
	// retained id becomes the next id to be assigned.
	id = min(id, c.nextID)
	if id <= c.firstID {
		return nil
	}
	c.firstID = id
	i := sort.Search(len(c.msgs), func(i int) bool { return c.msgs[i].ID >= id })
	c.msgs = slices.Clone(c.msgs[i:])
	c.wake()
	return nil
}

func (w *wal) Read(ctx context.Context, opt walimpls.ReadOption) (walimpls.ScannerImpls, error) {
	if w.isClosed() {
		return nil, fmt.Errorf("memory: read %q: %w", w.ch.name, walimpls.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: read %q: %w", w.ch.name, err)
	}
	c := w.ch
	c.mu.Lock()
	var start message.MessageID
	p := opt.DeliverPolicy
	switch p.Kind {
	case walimpls.DeliverKindAll:
		start = c.firstID
	case walimpls.DeliverKindLatest:
		start = c.nextID
	case walimpls.DeliverKindStartFrom:
		start = max(p.ID, 1)
	case walimpls.DeliverKindStartAfter:
		start = p.ID + 1
	default:
		c.mu.Unlock()
		return nil, fmt.Errorf("memory: read %q: unknown deliver policy kind %d", c.name, p.Kind)
	}
	firstID := c.firstID
	c.mu.Unlock()
	if start < firstID {
		return nil, fmt.Errorf("memory: read %q from id %d (first retained %d): %w", c.name, start, firstID, walimpls.ErrTruncated)
	}
	size := opt.ReadAheadBufferSize
	if size <= 0 {
		size = defaultReadAhead
	}
	s := &scanner{
		name: opt.Name, w: w, next: start,
		out: make(chan message.ImmutableMessage, size), stop: make(chan struct{}), done: make(chan struct{}),
	}
	w.mu.Lock()
	if w.isClosed() {
		w.mu.Unlock()
		return nil, fmt.Errorf("memory: read %q: %w", c.name, walimpls.ErrClosed)
	}
	w.scanners[s] = struct{}{}
	w.mu.Unlock()
	go s.run()
	return s, nil
}

// Close refuses new appends, waits until every append in flight was
// reported, and closes every scanner opened from the WAL.
func (w *wal) Close() {
	w.closeOnce.Do(func() {
		w.mu.Lock()
		close(w.closed)
		for w.open > 0 {
			w.idle.Wait()
		}
		ss := make([]*scanner, 0, len(w.scanners))
		for s := range w.scanners {
			ss = append(ss, s)
		}
		w.mu.Unlock()
		for _, s := range ss {
			<-s.done
		}
		w.opener.forget(w)
	})
}

func (w *wal) forget(s *scanner) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.scanners, s)
}

// Count is the number of messages stored on the channel.
func (w *wal) Count(ctx context.Context) (uint64, error) {
	if w.isClosed() {
		return 0, fmt.Errorf("memory: count %q: %w", w.ch.name, walimpls.ErrClosed)
	}
	w.ch.mu.Lock()
	defer w.ch.mu.Unlock()
	return uint64(len(w.ch.msgs)), nil
}
