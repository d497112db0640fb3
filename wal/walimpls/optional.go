package walimpls

import (
	"context"
	"errors"

	"github.com/consumerd/consumerd/wal/message"
)

// AsyncAppender is an optional interface a WALImpls may implement to let the
// adaptor pipeline asynchronous appends (JetStream implements it with
// PublishAsync).
//
// Contract:
//   - Messages passed by successive AppendAsync calls from one goroutine are
//     stored in call order relative to each other (a message is never stored
//     before one passed to an earlier call, though either may fail).
//   - cb is called exactly once per call, with the assigned id or an error,
//     possibly from another goroutine and possibly before AppendAsync returns.
//     The adaptor's callback records the outcome and may go on to run its
//     callers' callbacks (which must not block) on the same goroutine; it
//     never waits for another acknowledgement, so the backend may call cb on
//     the goroutine that processes acknowledgements.
//   - Errors are as for Append: ErrFenced once the term was superseded (and
//     for every later call), an error wrapping ErrClosed after Close, a ctx
//     error when ctx ended first (the message may or may not have been stored).
//   - AppendAsync may block to apply backpressure, but returns when ctx ends.
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
// with err: false for nil, ErrFenced, ErrClosed, ErrTruncated,
// context.Canceled, context.DeadlineExceeded and errors wrapped by Permanent.
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
		errors.Is(err, ErrScannerClosed),
		errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded):
		return false
	}
	return true
}
