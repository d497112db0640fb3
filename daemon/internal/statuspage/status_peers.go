package statuspage

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/daemon/internal/query"
)

// peerStatusTimeout bounds each other member's /v1/status for a status
// page: a frozen or partitioned member makes the page slower by at most
// this, and its replicas show what etcd holds.
const peerStatusTimeout = time.Second

// memberStatuses gathers the /v1/status of the members keys (zone/id) of
// snap: self (this member, answered without HTTP) and the others from
// their endpoints, in parallel (at most query.MaxParallel at once), each
// within peerStatusTimeout. A member that cannot answer has its error.
// Every goroutine it starts has ended when it returns.
func memberStatuses(ctx context.Context, hc *http.Client, snap allocator.Snapshot, self api.StatusResponse, keys map[string]bool) map[string]memberStatus {
	out := make(map[string]memberStatus, len(keys))
	selfKey := self.Zone + "/" + self.Member
	type answer struct {
		key string
		ms  memberStatus
	}
	answers := make(chan answer, len(keys))
	sem := make(chan struct{}, query.MaxParallel)
	asked := 0
	for _, m := range snap.Members {
		key := m.Key()
		if !keys[key] {
			continue
		}
		if key == selfKey {
			st := self
			out[key] = memberStatus{St: &st}
			continue
		}
		if m.Spec.Endpoint == "" {
			out[key] = memberStatus{Err: errors.New("no endpoint in its member spec")}
			continue
		}
		asked++
		go func() { // owned here: sends exactly one answer, bounded by ctx and the timeout
			sem <- struct{}{}
			defer func() { <-sem }()
			answers <- answer{key, peerStatus(ctx, hc, m)}
		}()
	}
	for range asked {
		a := <-answers
		out[a.key] = a.ms
	}
	return out
}

// peerStatus fetches member m's /v1/status, checking that it answers as m.
func peerStatus(ctx context.Context, hc *http.Client, m allocator.MemberInfo) memberStatus {
	ctx, cancel := context.WithTimeout(ctx, peerStatusTimeout)
	defer cancel()
	st, err := cluster.FetchStatus(ctx, hc, m.Spec.Endpoint)
	if err != nil {
		return memberStatus{Err: err} // it names the URL
	}
	if st.Zone != m.Zone || st.Member != m.ID {
		return memberStatus{Err: fmt.Errorf("%s answers as member %s/%s, not %s", m.Spec.Endpoint, st.Zone, st.Member, m.Key())}
	}
	return memberStatus{St: st}
}
