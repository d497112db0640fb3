package topic

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// Publisher appends messages to topic partitions. It opens each partition's
// WAL (term 0, unfenced) on first use and keeps it until Close. It is safe for
// concurrent use. Messages published from one goroutine to one partition are
// stored in call order (the WAL's guarantee).
//
// Idempotent by default: a message without a DedupeID gets one, the
// publisher's random run id and a sequence number, so the WAL's retries of
// it (through a broker restart or a leader change, resent in call order
// until the caller's ctx ends) never store it twice — on backends that
// honour DedupeIDs, within their duplicate window (JetStream: the stream's
// duplicate window, 2 minutes by default). A retried message whose first
// try really was not stored may land after later messages of its
// partition that were (see wal's planSettle); none is lost or doubled.
// Give messages your own DedupeIDs to make a re-run of the same input after
// a failure store nothing twice too. A ctx without a deadline lets an
// append wait for the broker until Close.
type Publisher struct {
	opener wal.Opener
	logger hclog.Logger
	runID  string        // prefix of default DedupeIDs: random per publisher
	seq    atomic.Uint64 // suffix of default DedupeIDs

	mu     sync.Mutex
	closed bool
	wals   map[string]*walEntry // by channel
}

// walEntry opens a partition's WAL once; concurrent first users wait.
type walEntry struct {
	ready chan struct{}
	w     wal.WAL
	err   error
}

// NewPublisher returns a publisher appending through opener. A nil logger
// discards logs.
func NewPublisher(opener wal.Opener, logger hclog.Logger) *Publisher {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return &Publisher{opener: opener, logger: logger, runID: "tp" + hex.EncodeToString(b[:]) + "/",
		wals: make(map[string]*walEntry)}
}

// stamp gives msg a default DedupeID unless it has one.
func (p *Publisher) stamp(msg *message.MutableMessage) {
	if msg.DedupeID == "" {
		msg.DedupeID = p.runID + strconv.FormatUint(p.seq.Add(1), 36)
	}
}

// wal returns the partition's WAL, opening it on first use. A failed open is
// not cached: the next call tries again.
func (p *Publisher) wal(ctx context.Context, part Partition) (wal.WAL, error) {
	if err := checkName(part.Topic); err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	if part.Index < 0 || part.Index >= MaxPartitions {
		return nil, fmt.Errorf("publish to topic %q: partition %d out of range [0, %d)", part.Topic, part.Index, MaxPartitions)
	}
	ch := part.Channel()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("publish to %q: publisher: %w", ch, wal.ErrClosed)
	}
	e, ok := p.wals[ch]
	if !ok {
		e = &walEntry{ready: make(chan struct{})}
		p.wals[ch] = e
		p.mu.Unlock()
		e.w, e.err = p.opener.Open(ctx, &wal.OpenOption{Channel: ch})
		if e.err != nil {
			p.mu.Lock()
			delete(p.wals, ch)
			p.mu.Unlock()
		} else {
			p.logger.Debug("opened partition WAL", "channel", ch)
		}
		close(e.ready)
	} else {
		p.mu.Unlock()
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("publish to %q: waiting for open: %w", ch, ctx.Err())
	}
	if e.err != nil {
		return nil, fmt.Errorf("publish to %q: %w", ch, e.err)
	}
	return e.w, nil
}

// partition picks the partition of msg in topic d.
func partition(d Description, msg *message.MutableMessage) (Partition, error) {
	if err := d.Validate(); err != nil {
		return Partition{}, fmt.Errorf("publish: %w", err)
	}
	return Partition{Topic: d.Name, Index: PartitionFor(msg.Key, d.Partitions)}, nil
}

// Publish appends msg to partition PartitionFor(msg.Key, d.Partitions) of
// topic d and waits for the acknowledgement.
func (p *Publisher) Publish(ctx context.Context, d Description, msg message.MutableMessage) (Partition, message.MessageID, error) {
	part, err := partition(d, &msg)
	if err != nil {
		return Partition{}, 0, err
	}
	id, err := p.PublishTo(ctx, part, msg)
	return part, id, err
}

// PublishAsync is Publish without waiting: cb is called exactly once with
// the outcome (on the caller's goroutine when the message could not be
// queued, for example a bad description).
func (p *Publisher) PublishAsync(ctx context.Context, d Description, msg message.MutableMessage, cb func(Partition, message.MessageID, error)) {
	part, err := partition(d, &msg)
	if err != nil {
		cb(Partition{}, 0, err)
		return
	}
	w, err := p.wal(ctx, part)
	if err != nil {
		cb(part, 0, err)
		return
	}
	p.stamp(&msg)
	w.AppendAsync(ctx, msg, func(r *wal.AppendResult, err error) {
		if err != nil {
			cb(part, 0, fmt.Errorf("publish to %q: %w", part.Channel(), err))
			return
		}
		cb(part, r.MessageID, nil)
	})
}

// PublishTo appends msg to an explicit partition and waits for the
// acknowledgement.
func (p *Publisher) PublishTo(ctx context.Context, part Partition, msg message.MutableMessage) (message.MessageID, error) {
	w, err := p.wal(ctx, part)
	if err != nil {
		return 0, err
	}
	p.stamp(&msg)
	r, err := w.Append(ctx, msg)
	if err != nil {
		return 0, fmt.Errorf("publish to %q: %w", part.Channel(), err)
	}
	return r.MessageID, nil
}

// Close closes every partition WAL the publisher opened (waiting for their
// in-flight appends). Later publishes fail with wal.ErrClosed. It does not
// close the opener.
func (p *Publisher) Close() {
	p.mu.Lock()
	p.closed = true
	entries := p.wals
	p.wals = make(map[string]*walEntry)
	p.mu.Unlock()
	for _, e := range entries {
		<-e.ready
		if e.err == nil {
			e.w.Close()
		}
	}
}
