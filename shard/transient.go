package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/internal/retry"
	"github.com/consumerd/consumerd/wal"
)

// A replica's failures are of two kinds. FAILED is for the application's own
// errors and for damage a person must judge: the replica stops and stays
// stopped until someone acts. A transient failure of the WAL or etcd — a
// disconnect, a timeout, a leader change that outlasted the retries — is
// not the shard's fault: the replica aborts what it had open (nothing
// uncommitted is kept) and restarts its lifecycle by itself, with backoff.
// Restarting is safe because the lifecycle starts from what is durable: the
// local database is reused up to its applied position and the rest replayed
// from the recovery log.

// transientError marks a failure that restarting the replica mends.
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// markTransient marks err (when not nil) as transient; for failures of etcd,
// which the WAL's retries do not see.
func markTransient(err error) error {
	if err == nil {
		return nil
	}
	return &transientError{err: err}
}

// isTransient reports whether a replica that stopped with err restarts by
// itself: the WAL's retries ran out (retry.ErrExhausted: the failure lasted
// longer than they wait), a scanner's backend failed transiently
// (wal.ErrTransient) or the error was marked transient, unless it also
// says the replica was fenced by a newer primary or its log was truncated
// (those are decided elsewhere: the assignment moved, or a snapshot).
func isTransient(err error) bool {
	var t *transientError
	if !errors.Is(err, retry.ErrExhausted) && !errors.Is(err, wal.ErrTransient) && !errors.As(err, &t) {
		return false
	}
	return !errors.Is(err, wal.ErrFenced) && !errors.Is(err, wal.ErrTruncated) &&
		!errors.Is(err, errStandbyBehind) && !errors.Is(err, context.Canceled)
}

// restartBackoff paces a replica's restarts after transient failures; a
// lifecycle that ran restartResetAfter without failing starts the backoff
// over.
var restartBackoff = retry.Policy{Initial: 500 * time.Millisecond, Max: 30 * time.Second}

const restartResetAfter = time.Minute

// restartAfter decides whether the replica restarts after err (a transient
// failure, ctx still live) and waits out the backoff, saying why in the log
// and in the replica's status. ran is how long the failed lifecycle ran.
func (r *replica) restartAfter(ctx context.Context, err error, ran time.Duration, b *retry.Backoff) bool {
	if ctx.Err() != nil || !isTransient(err) {
		return false
	}
	if ran >= restartResetAfter {
		b.Reset()
	}
	wait, _ := b.Next() // no attempt bound
	metricRestarts.WithLabelValues(r.id).Inc()
	r.logger.Warn("transient failure of the WAL or etcd: restarting the replica", "error", err,
		"attempt", b.Attempt(), "backoff", wait.String())
	r.setState(ctx, allocator.StateBackfill, allocator.TruncateError(fmt.Sprintf("restarting in %s after a transient failure: %v", wait.Round(time.Millisecond), err)))
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
