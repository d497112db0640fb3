package memory

import (
	"context"
	"fmt"
	"slices"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// MaxBatch is the memory backend's bound on a batch's messages (as
// JetStream's default for atomic batches, less the marker).
const MaxBatch = 999

var _ walimpls.BatchAppender = (*wal)(nil)

// AppendBatch stores the batch and its marker under one lock: all or
// nothing. The append hook sees each message at BeforeStore (an error stores
// nothing) and the marker (Properties["marker"] = chain) at AfterStore (an
// error is a lost acknowledgement: the batch stays stored).
func (w *wal) AppendBatch(ctx context.Context, b walimpls.Batch) (walimpls.BatchResult, error) {
	if w.isClosed() {
		return walimpls.BatchResult{}, fmt.Errorf("memory: append batch to %q: %w", w.ch.name, walimpls.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return walimpls.BatchResult{}, fmt.Errorf("memory: append batch to %q: %w", w.ch.name, err)
	}
	if len(b.Messages) > MaxBatch {
		return walimpls.BatchResult{}, walimpls.Permanent(fmt.Errorf("memory: append batch to %q: %d messages, at most %d", w.ch.name, len(b.Messages), MaxBatch))
	}
	for i := range b.Messages {
		if err := w.CheckMessage(&b.Messages[i]); err != nil {
			return walimpls.BatchResult{}, fmt.Errorf("memory: append batch to %q: message %d: %w", w.ch.name, i, err)
		}
	}
	hook := w.st.appendHook()
	if hook != nil {
		for i := range b.Messages {
			if err := hook(w.ch.name, &b.Messages[i], BeforeStore); err != nil {
				return walimpls.BatchResult{}, fmt.Errorf("memory: append batch to %q: %w", w.ch.name, err)
			}
		}
	}
	c := w.ch
	c.mu.Lock()
	if err := c.checkTerm(w.term); err != nil {
		c.mu.Unlock()
		return walimpls.BatchResult{}, err
	}
	if last := c.markers[b.Chain]; last.ID != b.After {
		c.mu.Unlock()
		return walimpls.BatchResult{}, fmt.Errorf("memory: append batch to %q: chain %q's last marker is %d, the batch expects %d: %w",
			c.name, b.Chain, last.ID, b.After, walimpls.ErrStaleChain)
	}
	var res walimpls.BatchResult
	for i := range b.Messages {
		id := c.storeLocked(&b.Messages[i])
		if i == 0 {
			res.FirstID = id
		}
	}
	res.MarkerID = c.nextID
	c.nextID++ // markers take ids, as JetStream's do, but are not messages
	c.markers[b.Chain] = walimpls.Marker{ID: res.MarkerID, Payload: slices.Clone(b.Marker)}
	c.wake()
	c.mu.Unlock()
	if hook != nil {
		marker := message.MutableMessage{Payload: b.Marker, Properties: map[string]string{"marker": b.Chain}}
		if err := hook(w.ch.name, &marker, AfterStore); err != nil {
			return walimpls.BatchResult{}, fmt.Errorf("memory: append batch to %q: acknowledgement of marker %d lost: %w", c.name, res.MarkerID, err)
		}
	}
	return res, nil
}

// LastMarker returns the chain's last marker.
func (w *wal) LastMarker(ctx context.Context, chain string) (walimpls.Marker, error) {
	if w.isClosed() {
		return walimpls.Marker{}, fmt.Errorf("memory: last marker of %q: %w", w.ch.name, walimpls.ErrClosed)
	}
	w.ch.mu.Lock()
	defer w.ch.mu.Unlock()
	m := w.ch.markers[chain]
	m.Payload = slices.Clone(m.Payload)
	return m, nil
}

// MaxBatch is MaxBatch.
func (w *wal) MaxBatch() int { return MaxBatch }

// Atomic is true: a batch is stored under one lock.
func (w *wal) Atomic() bool { return true }
