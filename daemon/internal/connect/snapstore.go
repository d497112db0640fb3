package connect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/consumerd/consumerd/internal/natsconn"
	"github.com/consumerd/consumerd/internal/retry"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	"github.com/hashicorp/go-hclog"
)

// OpenSnapshotStore opens the snapshot store: a directory store when dir is
// set, else the JetStream object store on the WAL's NATS (the bucket of the
// cluster's WAL namespace). close releases it.
func OpenSnapshotStore(ctx context.Context, dir, walURL, namespace string, replicas int, wait time.Duration, sec natsconn.Security, log hclog.Logger) (st snapshot.Store, closeFn func(), err error) {
	if dir != "" {
		ds, err := snapshot.NewDirStore(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("--snapshot.dir: %w", err)
		}
		return ds, func() {}, nil
	}
	// A NATS cluster electing a leader (a server just lost) leaves requests
	// unanswered for a while: each try is bounded, and tries go on for
	// wait (serve: a minute; a client command: one try) before giving up,
	// naming the last error.
	var js *snapshot.JetStreamStore
	wctx, cancel := context.WithTimeout(ctx, max(wait, 10*time.Second))
	defer cancel()
	attempts := 0 // until wctx ends
	if wait <= 0 {
		attempts = 1
	}
	err = retry.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Attempts: attempts}.Do(wctx, retry.Call{
		OnRetry: func(attempt int, wait time.Duration, err error) {
			log.Warn("snapshot store not reachable yet; retrying", "attempt", attempt, "in", wait, "error", err)
		},
	}, func() error {
		tctx, cancel := context.WithTimeout(wctx, 10*time.Second)
		defer cancel()
		var derr error
		js, derr = snapshot.DialJetStreamStore(tctx, walURL, snapshot.JetStreamConfig{Bucket: snapshot.BucketName(namespace), Replicas: replicas, Security: sec})
		if derr != nil && wctx.Err() == nil {
			return errors.New(derr.Error()) // this try's own deadline: retry
		}
		return derr
	})
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot store: %w", withHint(err, natsHint(err)))
	}
	return js, js.Close, nil
}
