package connect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/consumerd/consumerd/internal/retry"
)

// atStartEtcdWait bounds how long a member starting up waits out an etcd
// cluster that answers but cannot serve requests (no leader, a request timed
// out while it elects one): longer than any election, short enough that a
// cluster that stays broken fails the start loudly.
const atStartEtcdWait = time.Minute

// TransientEtcd reports whether err from an etcd request is worth another
// try: the cluster is electing a leader, or a request timed out or lost its
// connection on the way. Refusals (auth, permissions, bad requests) are not.
func TransientEtcd(err error) bool {
	for _, e := range []error{
		rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost,
		rpctypes.ErrTimeoutWaitAppliedIndex, rpctypes.ErrNoLeader, rpctypes.ErrLeaderChanged,
		rpctypes.ErrNotCapable, rpctypes.ErrStopped, rpctypes.ErrTooManyRequests, rpctypes.ErrUnhealthy,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	if s, ok := status.FromError(err); ok && s.Code() == codes.Unavailable {
		return true
	}
	return false
}

// RetryAtStart runs fn, an etcd request a member makes while starting up,
// again while it fails transiently (TransientEtcd), logging each retry, for
// up to atStartEtcdWait: a member started while etcd elects a leader (a
// restart during an etcd fault) must wait, not exit. what names the request
// in the logs; the caller's error names it.
func RetryAtStart(ctx context.Context, log hclog.Logger, what string, fn func(context.Context) error) error {
	wctx, cancel := context.WithTimeout(ctx, atStartEtcdWait)
	defer cancel()
	err := retry.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second}.Do(wctx, retry.Call{
		Retryable: TransientEtcd,
		OnRetry: func(attempt int, wait time.Duration, err error) {
			log.Warn("etcd cannot serve a request yet; retrying", "request", what, "attempt", attempt, "wait", wait, "error", err)
		},
	}, func() error { return fn(wctx) })
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return fmt.Errorf("etcd could not serve the request for %s (is a majority of its members up and connected?): %w", atStartEtcdWait, err)
	}
	return err
}
