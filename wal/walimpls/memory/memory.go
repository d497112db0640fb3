package memory

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
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

// AppendHook is consulted on every append, once per stage: BeforeStore on
// the appending goroutine (like a slow send), AfterStore on the opener's
// acknowledgement goroutine (like a slow reply: it holds up the outcomes of
// every later append of the opener). It may block (to inject delays) and may
// return an error (to inject faults). It is called without any lock held.
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

// Build returns an opener over the builder's store: one "connection", with
// one goroutine that delivers the outcomes of its appends (stopped by Close).
// It never fails.
func (b *Builder) Build() (walimpls.OpenerImpls, error) {
	b.st.mu.Lock()
	seed := b.st.shuffleSeed
	b.st.mu.Unlock()
	o := &opener{st: b.st, wals: make(map[*wal]struct{}), acks: newAcker(seed)}
	go o.acks.run()
	return o, nil
}

// SetAppendHook installs fn (nil removes it) as the hook every later Append of
// every opener built by b consults.
func (b *Builder) SetAppendHook(fn func(channel string, msg *message.MutableMessage, stage Stage) error) {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	b.st.hook = fn
}

// ScanHook is consulted by every scanner before it delivers a message: an
// error stops the scanner with that error, as a lost connection or an
// unanswered request stops a real one mid-read.
type ScanHook func(channel string, id message.MessageID) error

// SetScanHook installs fn (nil removes it) as the hook every scanner of
// every opener built by b consults.
func (b *Builder) SetScanHook(fn ScanHook) {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	b.st.scan = fn
}

// ShuffleAcks makes the openers built after the call report the outcomes of
// appends in flight in a random order (seeded; 0 restores arrival order), as
// acknowledgements that arrive on different paths of a real connection may
// (a reply, a timeout, a disconnect): the adaptor must deliver them to its
// callers in call order all the same.
func (b *Builder) ShuffleAcks(seed uint64) {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	b.st.shuffleSeed = seed
}

// store holds every channel of a Builder.
type store struct {
	mu          sync.Mutex
	channels    map[string]*channel
	hook        AppendHook
	scan        ScanHook
	shuffleSeed uint64
	maxBytes    atomic.Int64 // SetMaxMessageBytes (0: none)
}

// channelIf is the channel named name, created when missing if create is
// set (ok false: missing and not created).
func (s *store) channelIf(name string, create bool) (_ *channel, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.channels[name]
	if !ok && !create {
		return nil, false
	}
	if !ok {
		c = &channel{name: name, nextID: 1, firstID: 1, dedupe: make(map[string]message.MessageID),
			markers: make(map[string]walimpls.Marker), notify: make(chan struct{}),
			incarnation: fmt.Sprintf("memory-%d", incarnations.Add(1))}
		s.channels[name] = c
	}
	return c, true
}

func (s *store) appendHook() AppendHook {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hook
}

func (s *store) scanHook() ScanHook {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scan
}

// channel is one log. Messages are kept in id order; ids before firstID were
// truncated.
type channel struct {
	name string

	mu      sync.Mutex
	msgs    []message.ImmutableMessage
	nextID  message.MessageID
	lastID  message.MessageID // the last message's id (markers take ids too, but are not messages)
	firstID message.MessageID // lowest id not truncated
	term    uint64            // highest non-zero term any WAL opened with
	dedupe  map[string]message.MessageID
	markers map[string]walimpls.Marker // last marker per chain (see batch.go)
	notify  chan struct{}              // closed (and replaced) on every append and truncate
	// incarnation names this life of the channel (walimpls.Bounds): one
	// removed and created again has another.
	incarnation string
}

// incarnations counts the channels created in the process, so that each
// life of a channel has its own incarnation.
var incarnations atomic.Uint64

// wake must be called with c.mu held.
func (c *channel) wake() {
	close(c.notify)
	c.notify = make(chan struct{})
}

// store appends msg if term is still current. It must be called without c.mu.
func (c *channel) store(term uint64, msg *message.MutableMessage) (message.MessageID, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkTerm(term); err != nil {
		return 0, err
	}
	id := c.storeLocked(msg)
	c.wake()
	return id, nil
}

// checkTerm fails an append of a superseded writer. Called with c.mu held.
func (c *channel) checkTerm(term uint64) error {
	if term != 0 && term < c.term {
		return fmt.Errorf("memory: append to %q with term %d (current %d): %w", c.name, term, c.term, walimpls.ErrFenced)
	}
	return nil
}

// storeLocked stores msg (or finds its DedupeID) and returns its id. Called
// with c.mu held; the caller wakes scanners.
func (c *channel) storeLocked(msg *message.MutableMessage) message.MessageID {
	if msg.DedupeID != "" {
		if id, ok := c.dedupe[msg.DedupeID]; ok {
			return id
		}
	}
	id := c.nextID
	c.nextID++
	c.lastID = id
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
	return id
}
