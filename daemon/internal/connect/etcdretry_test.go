package connect

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestStartupEtcd: a member starting while etcd elects a leader retries the
// request (the chaos harness saw a member exit on "etcdserver: request timed
// out" while restarting during an etcd fault); a refusal is returned at once.
func TestStartupEtcd(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fails []error // returned by the first calls, then nil
		calls int
		ok    bool
	}{
		{"request timed out", []error{rpctypes.ErrTimeout, fmt.Errorf("txn: %w", rpctypes.ErrTimeoutDueToLeaderFail)}, 3, true},
		{"no leader", []error{rpctypes.ErrNoLeader}, 2, true},
		{"permission denied", []error{rpctypes.ErrPermissionDenied}, 1, false},
		{"auth failed", []error{rpctypes.ErrAuthFailed}, 1, false},
		{"other", []error{errors.New("bad request")}, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := RetryAtStart(t.Context(), hclog.NewNullLogger(), "test", func(context.Context) error {
				calls++
				if calls <= len(tc.fails) {
					return tc.fails[calls-1]
				}
				return nil
			})
			if (err == nil) != tc.ok || calls != tc.calls {
				t.Fatalf("error %v after %d calls; want ok=%v after %d", err, calls, tc.ok, tc.calls)
			}
			if !tc.ok && !errors.Is(err, tc.fails[0]) {
				t.Fatalf("error %v does not wrap %v", err, tc.fails[0])
			}
		})
	}
}
