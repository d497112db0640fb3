package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// ErrStopped is wrapped by the error of a retry cut short by Call.Stop.
var ErrStopped = errors.New("retry: stopped")

// ErrExhausted is wrapped by the error of a retry that used up
// Policy.Attempts.
var ErrExhausted = errors.New("retry: attempts exhausted")

// Policy is a backoff schedule. The zero Policy retries forever with the
// defaults (DefaultInitial, DefaultMax).
type Policy struct {
	// Initial is the nominal first wait (0: DefaultInitial).
	Initial time.Duration
	// Max caps the nominal wait (0: DefaultMax; raised to Initial if lower).
	Max time.Duration
	// Attempts bounds the tries, the first one included; 0 or less retries
	// until the context ends or Stop closes; 1 never retries.
	Attempts int
}

// Defaults of a zero Policy.
const (
	DefaultInitial = 10 * time.Millisecond
	DefaultMax     = time.Second
)

func (p Policy) bounds() (initial, ceiling time.Duration) {
	initial, ceiling = p.Initial, p.Max
	if initial <= 0 {
		initial = DefaultInitial
	}
	if ceiling <= 0 {
		ceiling = DefaultMax
	}
	return initial, max(ceiling, initial)
}

// Call says how one retried operation behaves.
type Call struct {
	// Stop, when closed, cuts retrying short: the error wraps ErrStopped.
	Stop <-chan struct{}
	// Retryable reports whether an error is worth another try; nil retries
	// every error. Context errors are never retried.
	Retryable func(error) bool
	// OnRetry, if set, is called before each wait (for logs and metrics):
	// attempt is the try that failed (1 for the first).
	OnRetry func(attempt int, wait time.Duration, err error)
	// RetryTimeouts retries an error that wraps context.DeadlineExceeded
	// while ctx itself is not done — a try's own timeout, as a server that
	// does not answer in time — when Retryable accepts it. Otherwise
	// context errors end Do at once.
	RetryTimeouts bool
}

// Do calls fn until it returns nil, returns an error that Call.Retryable
// rejects (returned as is), or the policy ends: attempts used up (the
// error wraps ErrExhausted and fn's last error), ctx done (wraps ctx.Err()
// and the last error) or Call.Stop closed (wraps ErrStopped and the last
// error).
func (p Policy) Do(ctx context.Context, c Call, fn func() error) error {
	b := p.Start()
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if errors.Is(err, context.Canceled) ||
			errors.Is(err, context.DeadlineExceeded) && !(c.RetryTimeouts && ctx.Err() == nil) {
			return err
		}
		if c.Retryable != nil && !c.Retryable(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w while retrying (last error: %w)", ctx.Err(), err)
		}
		wait, ok := b.Next()
		if !ok {
			return fmt.Errorf("%w: gave up after %d attempts: %w", ErrExhausted, b.attempt, err)
		}
		if c.OnRetry != nil {
			c.OnRetry(b.attempt, wait, err)
		}
		if werr := sleep(ctx, c.Stop, wait); werr != nil {
			return fmt.Errorf("%w while retrying (last error: %w)", werr, err)
		}
	}
}

// Start returns the policy's schedule as an iterator.
func (p Policy) Start() *Backoff {
	initial, ceiling := p.bounds()
	return &Backoff{attempts: p.Attempts, initial: initial, max: ceiling, next: initial}
}

// Backoff is a Policy's schedule in progress: for retry loops that are not
// one function call (a watch that resumes, a session that rejoins). Not safe
// for concurrent use.
type Backoff struct {
	attempts     int
	initial, max time.Duration
	next         time.Duration
	attempt      int // failed tries so far
}

// Next records a failed try and returns the wait before the next one, with
// jitter; ok is false when the attempts are used up.
func (b *Backoff) Next() (wait time.Duration, ok bool) {
	b.attempt++
	if b.attempts > 0 && b.attempt >= b.attempts {
		return 0, false
	}
	d := b.next
	b.next = min(2*b.next, b.max)
	return jitter(d), true
}

// Wait is Next followed by sleeping that long; it returns ctx.Err(), an
// error wrapping ErrStopped when stop closes first, or one wrapping
// ErrExhausted when the attempts are used up.
func (b *Backoff) Wait(ctx context.Context, stop <-chan struct{}) error {
	wait, ok := b.Next()
	if !ok {
		return fmt.Errorf("%w: gave up after %d attempts", ErrExhausted, b.attempt)
	}
	return sleep(ctx, stop, wait)
}

// Reset starts the schedule over, after a success.
func (b *Backoff) Reset() {
	b.attempt = 0
	b.next = b.initial
}

// Attempt is the number of failed tries since the start or the last Reset.
func (b *Backoff) Attempt() int { return b.attempt }

// jitter draws a wait uniformly from [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

func sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return ErrStopped
	}
}
