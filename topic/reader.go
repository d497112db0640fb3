package topic

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// Start is where a Reader starts in each partition: at its oldest message
// (FromOldest), after its head (FromHead: only messages stored after the
// Reader opened), or at a message id (FromID, inclusive).
type Start struct {
	kind startKind
	id   message.MessageID
}

type startKind int

const (
	startOldest startKind = iota
	startHead
	startID
)

// FromOldest starts at each partition's oldest message.
func FromOldest() Start { return Start{kind: startOldest} }

// FromHead starts after each partition's head: only new messages.
func FromHead() Start { return Start{kind: startHead} }

// FromID starts at message id (inclusive), a position in one partition.
func FromID(id message.MessageID) Start { return Start{kind: startID, id: id} }

// IsID reports whether s starts at a message id.
func (s Start) IsID() bool { return s.kind == startID }

// String is s as ParseStart reads it: "start", "end" or the id.
func (s Start) String() string {
	switch s.kind {
	case startHead:
		return "end"
	case startID:
		return "id " + s.id.String()
	}
	return "start"
}

// ParseStart reads "start", "end" or a message id (a decimal number, 1 or
// more); the error says which forms there are.
func ParseStart(s string) (Start, error) {
	switch s {
	case "start":
		return FromOldest(), nil
	case "end":
		return FromHead(), nil
	}
	id, err := message.ParseMessageID(s)
	if err != nil || id == 0 {
		return Start{}, fmt.Errorf("%q is not start, end or a message id (a decimal number, 1 or more)", s)
	}
	return FromID(id), nil
}

// policy is the scanner's start in a partition whose head is head.
func (s Start) policy(head message.MessageID) wal.DeliverPolicy {
	switch {
	case s.kind == startID:
		return wal.DeliverStartFrom(s.id)
	case s.kind == startHead && head > 0:
		return wal.DeliverStartAfter(head)
	default: // the oldest; or after the head of an empty partition: whatever comes
		return wal.DeliverAll()
	}
}

// nothingBefore reports whether a read that stops at head has nothing to
// read.
func (s Start) nothingBefore(head message.MessageID) bool {
	return head == 0 || s.kind == startHead || (s.kind == startID && s.id > head)
}

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	Opener wal.Opener
	Topic  string
	// Partitions are the partitions read, in the order ToHeads reads them.
	Partitions []int
	Start      Start
	// OpenTimeout bounds opening each partition and reading its head
	// (0: only ctx bounds them).
	OpenTimeout time.Duration
	// Server names the WAL's server in errors (e.g. "NATS at
	// nats://host:4222"); optional.
	Server string
	// Deliver receives each message with its partition, in id order per
	// partition, on the goroutine that called ToHeads or Follow. An error
	// ends the read with it.
	Deliver func(partition int, m *message.ImmutableMessage) error
	// Flush, when set, is called after each message Follow delivers, so
	// that a follower sees every message at once; an error ends the read.
	Flush func() error
}

// Reader reads partitions of a topic: each up to its head, the last
// message it held when the Reader opened (ToHeads), or every message as it
// arrives (Follow). Marks and data alike are delivered; a message's
// properties say which is which.
type Reader struct {
	cfg   ReaderConfig
	where string
	parts []*readPartition
}

// readPartition is one partition being read.
type readPartition struct {
	index int
	w     wal.WAL
	head  message.MessageID // LastID when the Reader opened
}

// OpenReader opens every partition of cfg and takes its head. The caller
// closes the Reader.
func OpenReader(ctx context.Context, cfg ReaderConfig) (*Reader, error) {
	r := &Reader{cfg: cfg}
	if cfg.Server != "" {
		r.where = " (" + cfg.Server + ")"
	}
	for _, i := range cfg.Partitions {
		if err := r.openPartition(ctx, i); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

func (r *Reader) openPartition(ctx context.Context, i int) error {
	octx, cancel := ctx, context.CancelFunc(func() {})
	if r.cfg.OpenTimeout > 0 {
		octx, cancel = context.WithTimeout(ctx, r.cfg.OpenTimeout)
	}
	defer cancel()
	w, err := r.cfg.Opener.Open(octx, &wal.OpenOption{Channel: ChannelName(r.cfg.Topic, i)})
	if err != nil {
		return fmt.Errorf("opening topic %s partition %d%s: %w", r.cfg.Topic, i, r.where, err)
	}
	head, err := w.LastID(octx)
	if err != nil {
		w.Close()
		return fmt.Errorf("topic %s partition %d: reading its last id%s: %w", r.cfg.Topic, i, r.where, err)
	}
	r.parts = append(r.parts, &readPartition{index: i, w: w, head: head})
	return nil
}

// Close closes every partition.
func (r *Reader) Close() {
	for _, p := range r.parts {
		p.w.Close()
	}
}

// scan opens p's scanner at the configured start.
func (r *Reader) scan(ctx context.Context, p *readPartition) (wal.Scanner, error) {
	sc, err := p.w.Read(ctx, wal.ReadOption{Name: "consumerd-read", DeliverPolicy: r.cfg.Start.policy(p.head)})
	if err != nil {
		return nil, fmt.Errorf("reading topic %s partition %d from %s: %w", r.cfg.Topic, p.index, r.cfg.Start, err)
	}
	return sc, nil
}

// stopped is the error of a scanner whose channel closed.
func (r *Reader) stopped(p *readPartition, sc wal.Scanner) error {
	<-sc.Done()
	return fmt.Errorf("reading topic %s partition %d: %w", r.cfg.Topic, p.index, sc.Error())
}

// ToHeads reads each partition in turn up to its head.
func (r *Reader) ToHeads(ctx context.Context) error {
	for _, p := range r.parts {
		if r.cfg.Start.nothingBefore(p.head) {
			continue
		}
		if err := r.toHead(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

func (r *Reader) toHead(ctx context.Context, p *readPartition) error {
	sc, err := r.scan(ctx, p)
	if err != nil {
		return err
	}
	defer sc.Close()
	for {
		select {
		case m, ok := <-sc.Chan():
			if !ok {
				return r.stopped(p, sc)
			}
			if err := r.cfg.Deliver(p.index, &m); err != nil {
				return err
			}
			if m.ID >= p.head {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("reading topic %s partition %d: %w", r.cfg.Topic, p.index, ctx.Err())
		}
	}
}

// Follow delivers every partition's messages as they arrive, interleaved,
// until ctx ends (it then returns nil) or a scanner or Deliver fails. Every
// goroutine it starts has ended when it returns.
func (r *Reader) Follow(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	type arrival struct {
		p int
		m message.ImmutableMessage
	}
	arrivals := make(chan arrival)
	failed := make(chan error, len(r.parts))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs first: the relays end with ctx
	for _, p := range r.parts {
		sc, err := r.scan(ctx, p)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() { // owned here: relays p's messages until ctx ends or the scanner stops
			defer wg.Done()
			defer sc.Close()
			for {
				select {
				case m, ok := <-sc.Chan():
					if !ok {
						failed <- r.stopped(p, sc)
						return
					}
					select {
					case arrivals <- arrival{p.index, m}:
					case <-ctx.Done():
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for {
		select {
		case a := <-arrivals:
			if err := r.cfg.Deliver(a.p, &a.m); err != nil {
				return err
			}
			if r.cfg.Flush != nil {
				if err := r.cfg.Flush(); err != nil {
					return err
				}
			}
		case err := <-failed:
			if ctx.Err() != nil {
				return nil
			}
			return err
		case <-ctx.Done():
			return nil
		}
	}
}
