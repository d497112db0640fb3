package connect

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"

	"github.com/consumerd/consumerd/internal/natsconn"
	"github.com/consumerd/consumerd/internal/retry"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// Connecting to the WAL: OpenWAL for the client commands (one try, bounded
// by --dial-timeout), OpenWALAtStart for serve (waits out a JetStream that
// does not answer yet).

// OpenWAL connects to the NATS JetStream WAL at url, in namespace (never
// empty: the daemon always says which cluster it is), with sec's TLS and
// credentials.
func OpenWAL(url, namespace string, replicas int, connectTimeout time.Duration, sec natsconn.Security, log hclog.Logger) (wal.Opener, error) {
	if namespace == "" {
		return nil, errors.New("opening the WAL: no namespace given")
	}
	b := jetstream.NewBuilder(jetstream.Config{URL: url, Namespace: namespace, Replicas: replicas, ConnectTimeout: connectTimeout, Security: sec, Logger: log})
	op, err := wal.NewOpenerBuilder(b, wal.WithLogger(log)).Build()
	if err != nil {
		return nil, fmt.Errorf("cannot reach NATS JetStream at %s: %w", url, withHint(err, natsHint(err)))
	}
	return op, nil
}

// OpenWALAtStart is OpenWAL for a starting member: while the WAL cannot be
// reached yet (nothing listens at url, a connection times out, or the
// server is up but JetStream does not answer yet, as while a NATS cluster
// elects its meta leader) it waits and tries again, with a WARN per try
// saying what it waits for, until ctx ends (the operator's signal). A
// failure that waiting cannot heal (TLS, credentials, JetStream disabled)
// ends it at once.
func OpenWALAtStart(ctx context.Context, url, namespace string, replicas int, sec natsconn.Security, log hclog.Logger) (wal.Opener, error) {
	var opener wal.Opener
	err := retry.Policy{Initial: 500 * time.Millisecond, Max: 5 * time.Second}.Do(ctx, retry.Call{
		Retryable: WALWorthWaitingFor,
		// JetStream's answer is awaited with a timeout of its own: its
		// DeadlineExceeded is the server not answering yet, not serve's
		// context ending.
		RetryTimeouts: true,
		OnRetry: func(attempt int, wait time.Duration, err error) {
			log.Warn("waiting for NATS JetStream to answer (not up yet, or a NATS cluster still electing its leader); retrying until it does or serve is stopped",
				"url", url, "attempt", attempt, "backoff", wait, "error", err)
		},
	}, func() error {
		var err error
		opener, err = OpenWAL(url, namespace, replicas, 0, sec, log)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("stopped while waiting for NATS JetStream at %s: %w", url, err)
		}
		return nil, err
	}
	return opener, nil
}

// WALWorthWaitingFor reports whether err, from opening the WAL, may heal by
// itself: nothing listens yet, a connection or request timed out, or
// JetStream does not answer yet. Refusals by a server that answers (TLS,
// credentials, JetStream disabled) are not.
func WALWorthWaitingFor(err error) bool {
	if natsHint(err) != "" {
		return false
	}
	var nerr net.Error
	return errors.Is(err, jetstream.ErrJetStreamUnavailable) || errors.Is(err, nats.ErrNoServers) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, syscall.ECONNREFUSED) ||
		(errors.As(err, &nerr) && nerr.Timeout())
}
