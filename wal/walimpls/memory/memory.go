package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// Name is the backend's registry name.
const Name = "memory"

// defaultReadAhead is the scanner channel buffer when ReadOption leaves it 0.
const defaultReadAhead = 64

// Stage says when an append hook is consulted.
type Stage int

const (
	// BeforeStore: the message is not stored yet. An error returned here fails
	// the append and nothing is stored.
	BeforeStore Stage = iota
	// AfterStore: the message is stored and visible to scanners but not yet
	// acknowledged. An error returned here fails the append although the
	// message stays stored (a lost acknowledgement).
	AfterStore
)

// String names the stage.
func (s Stage) String() string {
	switch s {
	case BeforeStore:
		return "before-store"
	case AfterStore:
		return "after-store"
	default:
		return fmt.Sprintf("stage(%d)", int(s))
	}
}

// AppendHook is consulted on every Append, once per stage. It may block (to
// inject delays) and may return an error (to inject faults). It is called
// without any lock held, concurrently for concurrent appends.
type AppendHook func(channel string, msg *message.MutableMessage, stage Stage) error

// Builder builds openers over one in-process store. Every opener it builds
// shares the store, so channels and their ids survive opener Close and rebuild.
type Builder struct {
	st *store
}

// NewBuilder returns a builder over a fresh, empty store.
func NewBuilder() *Builder {
	return &Builder{st: &store{channels: make(map[string]*channel)}}
}

// Name is "memory".
func (b *Builder) Name() string { return Name }

// Build returns an opener over the builder's store. It never fails.
func (b *Builder) Build() (walimpls.OpenerImpls, error) {
	return &opener{st: b.st, wals: make(map[*wal]struct{})}, nil
}

// SetAppendHook installs fn (nil removes it) as the hook every later Append of
// every opener built by b consults.
func (b *Builder) SetAppendHook(fn func(channel string, msg *message.MutableMessage, stage Stage) error) {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	b.st.hook = fn
}

// EnableAsyncAppend makes WALs opened after the call implement
// walimpls.AsyncAppender (each WAL then stores its async appends in call order
// from one goroutine), so the adaptor's pipelined path can be tested on this
// backend. Off by default.
func (b *Builder) EnableAsyncAppend(on bool) {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	b.st.async = on
}

// store holds every channel of a Builder.
type store struct {
	mu       sync.Mutex
	channels map[string]*channel
	hook     AppendHook
	async    bool
}

func (s *store) channel(name string) *channel {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.channels[name]
	if !ok {
		c = &channel{name: name, nextID: 1, firstID: 1, dedupe: make(map[string]message.MessageID), notify: make(chan struct{})}
		s.channels[name] = c
	}
	return c
}

func (s *store) appendHook() (AppendHook, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hook, s.async
}

// channel is one log. Messages are kept in id order; ids before firstID were
// truncated.
type channel struct {
	name string

	mu      sync.Mutex
	msgs    []message.ImmutableMessage
	nextID  message.MessageID
	firstID message.MessageID // lowest id not truncated
	term    uint64            // highest non-zero term any WAL opened with
	dedupe  map[string]message.MessageID
	notify  chan struct{} // closed (and replaced) on every append and truncate
}

// wake must be called with c.mu held.
func (c *channel) wake() {
	close(c.notify)
	c.notify = make(chan struct{})
}

// store appends msg if term is still current. It must be called without c.mu.
func (c *channel) store(term uint64, msg *message.MutableMessage) (message.MessageID, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if term != 0 && term < c.term {
		return 0, fmt.Errorf("memory: append to %q with term %d (current %d): %w", c.name, term, c.term, walimpls.ErrFenced)
	}
	if msg.DedupeID != "" {
		if id, ok := c.dedupe[msg.DedupeID]; ok {
			return id, nil
		}
	}
	id := c.nextID
	c.nextID++
	c.msgs = append(c.msgs, message.ImmutableMessage{
		Channel:    c.name,
		ID:         id,
		Key:        msg.Key,
		Payload:    slices.Clone(msg.Payload),
		Properties: maps.Clone(msg.Properties),
		AppendTime: time.Now(),
	})
	if msg.DedupeID != "" {
		c.dedupe[msg.DedupeID] = id
	}
	c.wake()
	return id, nil
}

// opener is a connection to the store.
type opener struct {
	st *store

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
	c := o.st.channel(opt.Channel)
	if opt.Term != 0 {
		c.mu.Lock()
		if opt.Term > c.term {
			c.term = opt.Term
		}
		c.mu.Unlock()
	}
	_, async := o.st.appendHook()
	w := &wal{st: o.st, ch: c, term: opt.Term, closed: make(chan struct{}), scanners: make(map[*scanner]struct{}), opener: o}
	o.wals[w] = struct{}{}
	if async {
		aw := &asyncWAL{wal: w, queue: make(chan asyncReq, 256), stopped: make(chan struct{})}
		go aw.run()
		return aw, nil
	}
	return w, nil
}

// Close closes every WAL still open from this opener, then the opener.
func (o *opener) Close() {
	o.mu.Lock()
	o.closed = true
	wals := make([]*wal, 0, len(o.wals))
	for w := range o.wals {
		wals = append(wals, w)
	}
	o.mu.Unlock()
	for _, w := range wals {
		w.Close()
	}
}

func (o *opener) forget(w *wal) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.wals, w)
}

// wal is one open channel.
type wal struct {
	st     *store
	ch     *channel
	term   uint64
	opener *opener

	closeOnce sync.Once
	closed    chan struct{}
	mu        sync.Mutex
	scanners  map[*scanner]struct{}
}

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

func (w *wal) Append(ctx context.Context, msg message.MutableMessage) (message.MessageID, error) {
	if w.isClosed() {
		return 0, fmt.Errorf("memory: append to %q: %w", w.ch.name, walimpls.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory: append to %q: %w", w.ch.name, err)
	}
	hook, _ := w.st.appendHook()
	if hook != nil {
		if err := hook(w.ch.name, &msg, BeforeStore); err != nil {
			return 0, fmt.Errorf("memory: append to %q: %w", w.ch.name, err)
		}
		if w.isClosed() {
			return 0, fmt.Errorf("memory: append to %q: %w", w.ch.name, walimpls.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("memory: append to %q: %w", w.ch.name, err)
		}
	}
	id, err := w.ch.store(w.term, &msg)
	if err != nil {
		return 0, err
	}
	if hook != nil {
		if err := hook(w.ch.name, &msg, AfterStore); err != nil {
			return 0, fmt.Errorf("memory: append to %q: ack of id %d lost: %w", w.ch.name, id, err)
		}
	}
	return id, nil
}

func (w *wal) LastID(ctx context.Context) (message.MessageID, error) {
	if w.isClosed() {
		return 0, fmt.Errorf("memory: last id of %q: %w", w.ch.name, walimpls.ErrClosed)
	}
	w.ch.mu.Lock()
	defer w.ch.mu.Unlock()
	return w.ch.nextID - 1, nil
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

// Close closes the WAL and every scanner opened from it.
func (w *wal) Close() {
	w.closeOnce.Do(func() {
		w.mu.Lock()
		close(w.closed)
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

// scanner delivers a channel's messages from next on.
type scanner struct {
	name string
	w    *wal
	next message.MessageID

	out      chan message.ImmutableMessage
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	errMu    sync.Mutex
	err      error
}

func (s *scanner) Name() string                          { return s.name }
func (s *scanner) Chan() <-chan message.ImmutableMessage { return s.out }
func (s *scanner) Done() <-chan struct{}                 { return s.done }

func (s *scanner) Error() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

func (s *scanner) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

func (s *scanner) run() {
	err := s.loop()
	s.errMu.Lock()
	s.err = err
	s.errMu.Unlock()
	close(s.out)
	s.w.forget(s)
	close(s.done)
}

func (s *scanner) loop() error {
	c := s.w.ch
	var batch []message.ImmutableMessage
	for {
		c.mu.Lock()
		if s.next < c.firstID {
			first := c.firstID
			c.mu.Unlock()
			return fmt.Errorf("memory: scanner %q on %q: next id %d truncated (first retained %d): %w",
				s.name, c.name, s.next, first, walimpls.ErrTruncated)
		}
		i := sort.Search(len(c.msgs), func(i int) bool { return c.msgs[i].ID >= s.next })
		batch = append(batch[:0], c.msgs[i:min(len(c.msgs), i+cap(s.out)+1)]...)
		notify := c.notify
		c.mu.Unlock()

		for _, m := range batch {
			m.Payload = slices.Clone(m.Payload)
			m.Properties = maps.Clone(m.Properties)
			select {
			case s.out <- m:
				s.next = m.ID + 1
			case <-s.stop:
				return walimpls.ErrScannerClosed
			case <-s.w.closed:
				return fmt.Errorf("memory: scanner %q on %q: wal: %w", s.name, c.name, walimpls.ErrClosed)
			}
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-notify:
		case <-s.stop:
			return walimpls.ErrScannerClosed
		case <-s.w.closed:
			return fmt.Errorf("memory: scanner %q on %q: wal: %w", s.name, c.name, walimpls.ErrClosed)
		}
	}
}
