package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/internal/buildinfo"
	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/internal/retry"
	"github.com/consumerd/consumerd/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// runSession joins the cluster as a member, runs the shard service until the
// member session ends, and tears it down. It returns nil when the member
// drained after SetExiting, the member's error when its lease was lost, and
// ctx's error when ctx ended.
func (s *server) runSession(ctx context.Context) error {
	member, err := s.newMember(ctx)
	if err != nil {
		return err
	}
	defer member.Close()
	metricSessions.Inc()
	svc := shard.NewService(shard.Config{
		Member:  member,
		Opener:  s.opener,
		DataDir: s.cfg.DataDir, // databases at <data-dir>/shards/<shard>/
		Apps:    s.apps,
		Topics:  shard.EtcdTopics(s.client, s.cfg.EtcdPrefix),
		Logger:  s.log,
		// Snapshots bound recovery: restore, snapshot, truncate the log.
		Snapshots: s.snapshots,
		// Terms stay above every term a recovery log has seen, also when
		// etcd was rebuilt from empty.
		Terms: &allocator.Terms{Client: s.client, Prefix: s.cfg.EtcdPrefix},
		// One block cache and write buffer manager for all shard databases.
		Memory: s.memory,
		// What the primaries cost, for the leader's placement (-1: none).
		LoadInterval: cmp.Or(s.cfg.LoadInterval, -1),
	})
	sess := &session{member: member, svc: svc}
	s.sess.Store(sess)
	defer s.sess.CompareAndSwap(sess, nil)
	if s.exiting.Load() {
		if err := member.SetExiting(ctx); err != nil {
			s.log.Warn("marking member exiting", "error", err)
		}
	}

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	svcDone := make(chan error, 1)
	go func() { svcDone <- svc.Run(sctx) }() // owned here: ends with sctx
	memberDone := make(chan error, 1)
	go func() { memberDone <- member.Run(sctx) }() // owned here: ends with sctx or the lease
	watchDone := make(chan struct{})
	go func() { // owned here: ends with sctx
		defer close(watchDone)
		s.watchUnread(sctx, member)
	}()
	defer func() { cancel(); <-watchDone }()

	var memberErr, svcErr error
	select {
	case memberErr = <-memberDone:
		cancel()
		svcErr = <-svcDone
	case svcErr = <-svcDone:
		// The service must run as long as the member holds assignments:
		// end the session (its lease is revoked by Close) and rejoin.
		cancel()
		memberErr = <-memberDone
		if svcErr == nil && ctx.Err() == nil {
			svcErr = errors.New("shard service stopped")
		}
		if svcErr != nil && ctx.Err() == nil {
			return fmt.Errorf("shard service: %w", svcErr)
		}
	}
	if svcErr != nil && !errors.Is(svcErr, context.Canceled) && ctx.Err() == nil {
		s.log.Warn("shard service stopped", "error", svcErr)
	}
	if memberErr != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return memberErr
}

// newMember announces this member. Its own previous incarnation's key is
// reclaimed by NewMember (same instance id); a key of another instance is
// waited out while its lease runs down (a dead process), and a fatalError
// once the lease is seen renewed (a live process with the same id).
func (s *server) newMember(ctx context.Context) (*allocator.Member, error) {
	cfg := allocator.Config{
		Client:   s.client,
		Prefix:   s.cfg.EtcdPrefix,
		Zone:     s.cfg.Zone,
		MemberID: s.cfg.MemberID,
		LeaseTTL: s.cfg.LeaseTTL,
		Spec: allocator.MemberSpec{
			Endpoint:  s.endpoint,
			ItemLimit: s.cfg.Limit,
			Exiting:   s.exiting.Load(),
			Version:   buildinfo.Current.Version,
			Instance:  s.instance,
		},
		DecodeItem:   shard.DecodeSpec,
		Logger:       s.log,
		PlaceByCount: s.cfg.Placement == "count",
	}
	wait := retry.Policy{Initial: 100 * time.Millisecond, Max: 500 * time.Millisecond}.Start()
	var holder *holderWatch
	for {
		m, err := allocator.NewMember(ctx, cfg)
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, allocator.ErrMemberExists) {
			return nil, fmt.Errorf("joining as member %s/%s: %w", s.cfg.Zone, s.cfg.MemberID, err)
		}
		// Another instance holds the key (a previous incarnation from this
		// data directory was reclaimed by NewMember). It is either a live
		// process, renewing its lease, or a dead one whose lease runs out:
		// watch the lease to tell which.
		if holder == nil {
			holder = &holderWatch{}
			s.log.Warn("member id held by another instance; checking whether it is alive", "member", s.cfg.MemberID, "zone", s.cfg.Zone, "error", err)
		}
		if live, why := holder.check(ctx, s.client, s.http, allocator.MemberKey(s.cfg.EtcdPrefix, s.cfg.Zone, s.cfg.MemberID), s.cfg.Zone, s.cfg.MemberID); live {
			return nil, fatalError{fmt.Errorf("member id %q in zone %q is held by a live process (%s), so this one cannot join: give each member its own --member.id, or stop the other one (%w)",
				s.cfg.MemberID, s.cfg.Zone, why, err)}
		}
		if err := wait.Wait(ctx, nil); err != nil {
			return nil, err
		}
	}
}

// holderWatch tells a live holder of a member key from a dead one: a live
// process answers /v1/status at its endpoint as that member, and renews its
// lease (the remaining TTL goes up); a dead one's lease runs down until etcd
// deletes the key.
type holderWatch struct {
	lease int64
	ttl   int64
}

// check reports whether the key's holder is alive, with why: it answers as
// zone/id at its endpoint, or its lease's remaining TTL went up between two
// checks of the same lease.
func (h *holderWatch) check(ctx context.Context, cli *clientv3.Client, hc *http.Client, key, zone, id string) (live bool, why string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
		return false, ""
	}
	var spec allocator.MemberSpec
	if json.Unmarshal(resp.Kvs[0].Value, &spec) == nil && spec.Endpoint != "" {
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cluster.FetchStatus(sctx, hc, spec.Endpoint)
		scancel()
		if err == nil && st.Member == id && st.Zone == zone && st.Session {
			return true, "it answers at " + spec.Endpoint
		}
	}
	lease := resp.Kvs[0].Lease
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(lease))
	if err != nil || ttl.TTL <= 0 {
		return false, ""
	}
	renewed := h.lease == lease && ttl.TTL > h.ttl
	h.lease, h.ttl = lease, ttl.TTL
	if !renewed {
		return false, ""
	}
	return true, fmt.Sprintf("its lease %x was just renewed", lease)
}
