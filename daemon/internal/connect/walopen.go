package connect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

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

// walStartWait bounds how long serve waits for JetStream to answer at
// start: a NATS cluster that starts with the members elects its meta leader
// within seconds (nats-server 2.14 took about 6 s in the chaos harness).
const walStartWait = 2 * time.Minute

// OpenWALAtStart is OpenWAL, waiting while the server is up but JetStream
// does not answer yet (WARN on each try, up to walStartWait). Any other
// failure (refused connection, TLS, credentials, JetStream disabled) ends
// it at once.
func OpenWALAtStart(ctx context.Context, url, namespace string, replicas int, sec natsconn.Security, log hclog.Logger) (wal.Opener, error) {
	wctx, cancel := context.WithTimeout(ctx, walStartWait)
	defer cancel()
	var opener wal.Opener
	err := retry.Policy{Initial: 500 * time.Millisecond, Max: 5 * time.Second}.Do(wctx, retry.Call{
		Retryable: func(err error) bool { return errors.Is(err, jetstream.ErrJetStreamUnavailable) },
		OnRetry: func(attempt int, wait time.Duration, err error) {
			log.Warn("JetStream does not answer yet (a NATS cluster still electing its leader?); retrying", "url", url, "attempt", attempt, "backoff", wait, "error", err)
		},
	}, func() error {
		var err error
		opener, err = OpenWAL(url, namespace, replicas, 0, sec, log)
		return err
	})
	if err != nil {
		return nil, err
	}
	return opener, nil
}
