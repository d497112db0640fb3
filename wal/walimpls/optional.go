package walimpls

import (
	"context"
	"errors"

	"github.com/consumerd/consumerd/wal/message"
)

// AsyncAppender is an optional interface a WALImpls implements to pipeline
// appends (both backends do; the adaptor runs a backend without it through
// the same pipeline, one append completing per hand-off).
//
// Contract (checked by walimplstest's Async section):
//   - cb is called exactly once per call, with the assigned id or an error,
//     from any goroutine — possibly before AppendAsync returns — and in any
//     order relative to other calls' callbacks: the backend reports each
//     outcome as it arrives and keeps no queue to order them; the adaptor
//     puts them back in call order. cb never blocks on another reply, so the
//     backend may call it on the goroutine that processes replies.
//   - Appends passed by successive calls from one goroutine are stored in
//     call order: when both succeed, the earlier call has the lower id.
//   - A fenced writer (term > 0) keeps what it stored a prefix of its calls:
//     after an append fails (for any reason), an append handed in while
//     outcomes of earlier ones are still unreported fails unstored, with a
//     retryable error. Once every outcome is reported, the next append (the
//     caller's re-send of the first failed one, in order) starts afresh.
//     Re-sends keep the message's DedupeID, so one whose reply was lost is
//     acknowledged with its original id, not stored twice.
//   - Errors are as for Append: ErrFenced once the term was superseded (a
//     backend may first fail retryably, see ErrFenced), an error wrapping
//     ErrClosed after Close, a ctx error when ctx ended before the message
//     was sent.
//   - AppendAsync may block to apply backpressure, but returns when ctx ends.
//   - Close waits for (or, after a bound, fails) the appends in flight: each
//     is still reported.
type AsyncAppender interface {
	AppendAsync(ctx context.Context, msg message.MutableMessage, cb func(message.MessageID, error))
}

// permanentError marks an error the adaptor must not retry.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as not worth retrying (for example a message larger
// than the backend accepts). The adaptor retries every backend error except
// ErrFenced, ErrClosed, ErrTruncated, context errors and errors marked here.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsRetryable reports whether the adaptor may retry an operation that failed
// with err: false for nil, ErrFenced, ErrClosed, ErrTruncated, ErrChannelLost, ErrStaleChain,
// ErrNoChannel, context.Canceled, context.DeadlineExceeded and errors wrapped by Permanent.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var p *permanentError
	switch {
	case errors.As(err, &p),
		errors.Is(err, ErrFenced),
		errors.Is(err, ErrClosed),
		errors.Is(err, ErrTruncated),
		errors.Is(err, ErrChannelLost),
		errors.Is(err, ErrScannerClosed),
		errors.Is(err, ErrStaleChain),
		errors.Is(err, ErrNoChannel),
		errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded):
		return false
	}
	return true
}

// Counter is optionally implemented by a WALImpls: Count is the number of
// messages stored on the channel now (after truncation and retention), for
// operators (`consumerd topics list`).
type Counter interface {
	Count(ctx context.Context) (uint64, error)
}

// ChannelRemover is optionally implemented by an OpenerImpls: RemoveChannel
// deletes a channel and everything stored on it (`consumerd topics delete`).
// Removing a channel that does not exist is not an error. WALs still open on
// it may fail afterwards; opening it again creates it anew, with ids from 1.
type ChannelRemover interface {
	RemoveChannel(ctx context.Context, channel string) error
}

// ErrStaleChain is returned (wrapped) by BatchAppender.AppendBatch when the
// batch's chain position is stale: the chain's last marker is not the one the
// batch expects (another writer's batch, or an earlier attempt of this one,
// landed first). Nothing of the batch was stored. Read LastMarker to find out
// which.
var ErrStaleChain = errors.New("wal: batch expects a stale chain position")

// Batch is a group of messages stored all or nothing, closed by a marker
// that makes it one link of a compare-and-set chain: a writer (e.g. a shard
// publishing a transaction's outputs) names its chain, and each batch
// expects the chain's last marker. Two writers appending the same batch at
// the same position — a zombie and its successor, or a retry whose first
// attempt landed — store it at most once.
type Batch struct {
	// Messages are the batch's messages, delivered to scanners in order.
	// At most BatchAppender.MaxBatch.
	Messages []message.MutableMessage
	// Chain names the marker chain ([A-Za-z0-9._-]+, e.g. a shard id).
	Chain string
	// Marker is the marker's payload: opaque to the WAL, returned by
	// LastMarker (e.g. the transaction the batch belongs to).
	Marker []byte
	// After is the id of the chain's last marker the batch expects (0: the
	// chain has no marker yet on this channel).
	After message.MessageID
}

// BatchResult is where a stored batch landed.
type BatchResult struct {
	// FirstID is the id of the batch's first message (0 for an empty one).
	FirstID message.MessageID
	// MarkerID is the id of the batch's marker: the next batch's After.
	MarkerID message.MessageID
}

// Marker is a chain's last marker on a channel.
type Marker struct {
	// ID is its id (0: the chain has no marker on the channel).
	ID message.MessageID
	// Payload is the Batch.Marker it closed.
	Payload []byte
}

// BatchAppender is optionally implemented by a WALImpls: atomic, chained
// batches (exactly-once outputs). Markers take ids of the channel but are
// never delivered to scanners.
type BatchAppender interface {
	// AppendBatch stores b's messages and marker, all or nothing, if the
	// chain's last marker on the channel is b.After; otherwise it fails with
	// an error wrapping ErrStaleChain and stores nothing. Other errors are
	// as for Append; after a transient one the batch may or may not have
	// been stored (a retry then finds the chain moved).
	AppendBatch(ctx context.Context, b Batch) (BatchResult, error)
	// LastMarker returns the chain's last marker on the channel.
	LastMarker(ctx context.Context, chain string) (Marker, error)
	// MaxBatch bounds len(Batch.Messages).
	MaxBatch() int
	// Atomic reports whether a batch is stored all or nothing (true), or
	// message by message with dedupe ids (false: a batch cut short by a
	// crash is completed by its retry only within the backend's duplicate
	// window; see the backend's doc).
	Atomic() bool
}

// ServerInfo is optionally implemented by an OpenerImpls: what the backend
// server is, for operators (serve warns when batches are not atomic).
type ServerInfo interface {
	// ServerVersion is the connected server's version, e.g. "2.12.1".
	ServerVersion() string
	// AtomicBatches reports whether the server stores batches atomically.
	AtomicBatches() bool
}

// ConnectionInfo is optionally implemented by an OpenerImpls: the state of
// its connection to the backend, for operators (/v1/status, the status
// page).
type ConnectionInfo interface {
	// ConnectedURL is the URL of the server the connection is on, with
	// any password redacted; "" while disconnected.
	ConnectedURL() string
	// Connected reports whether the connection is up now.
	Connected() bool
}
