package allocator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/internal/ident"
	"github.com/consumerd/consumerd/internal/retry"
)

// Config configures a Member.
type Config struct {
	Client *clientv3.Client
	// Prefix is the root of the keyspace, e.g. "/consumerd".
	Prefix string
	// Zone and MemberID name the member (both valid ids: internal/ident).
	Zone, MemberID string
	// LeaseTTL is the member lease TTL (rounded up to whole seconds; etcd may
	// raise very small values to its minimum).
	LeaseTTL time.Duration
	// Spec is the announced member value.
	Spec MemberSpec
	// DecodeItem decodes item values; nil means DecodeGenericItem
	// ({"hot_standbys":k,"disable":b}).
	DecodeItem func(id string, raw []byte) (Item, error)
	Logger     hclog.Logger
	// PlaceByCount makes this member, while it leads, ignore load reports:
	// primaries are placed by count alone (they stay where they are).
	PlaceByCount bool
}

var (
	// ErrMemberExists is returned by NewMember when the member key is already
	// present: another process runs with the same zone and member id.
	ErrMemberExists = errors.New("member already exists")
	// ErrLeaseLost is returned by Run when the member's lease expired or its
	// key was deleted: every local assignment must stop.
	ErrLeaseLost = errors.New("member lease lost")
	// ErrAssignmentChanged is returned by UpdateStatus when the assignment key
	// no longer exists with the given CreateRevision.
	ErrAssignmentChanged = errors.New("assignment changed or removed")
)

// Member is one process's session in the allocator: a lease kept alive, the
// announced member key, a mirror of the keyspace, and — while it holds the
// oldest member key — the leader's schedule-and-converge loop.
//
// Lifecycle: NewMember announces; Run drives the mirror (and leadership)
// until ctx is done, the lease is lost, or the member exited after
// SetExiting; Close revokes the lease, which removes the member key and all
// its assignments at once.
type Member struct {
	cfg    Config
	prefix string
	key    string
	log    hclog.Logger
	lease  clientv3.LeaseID
	ks     *KeySpace

	local     chan LocalState
	done      chan struct{}
	doneOnce  sync.Once
	kaCancel  context.CancelFunc
	kaDone    chan struct{}
	closeOnce sync.Once
	closeErr  error

	// idleRev is the mirror revision at which this member, as leader, last
	// found nothing to converge (tests wait on it).
	idleRev atomic.Int64
	conv    converger

	mu        sync.Mutex
	spec      MemberSpec
	createRev int64
	running   bool
	exitingCh chan struct{}
}

// NewMember validates cfg, grants a lease with cfg.LeaseTTL, starts keeping
// it alive, and announces <root>/members/<zone>/<member> only if that key is
// absent. If it is present it revokes its lease and returns an error wrapping
// ErrMemberExists. The caller must Close the member.
func NewMember(ctx context.Context, cfg Config) (*Member, error) {
	if err := validateConfig(cfg); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	log = log.With("member", cfg.Zone+"/"+cfg.MemberID)
	m := &Member{
		cfg:       cfg,
		prefix:    cleanPrefix(cfg.Prefix),
		key:       MemberKey(cfg.Prefix, cfg.Zone, cfg.MemberID),
		log:       log,
		local:     make(chan LocalState, 1),
		done:      make(chan struct{}),
		kaDone:    make(chan struct{}),
		spec:      cfg.Spec,
		exitingCh: make(chan struct{}),
	}
	m.ks = NewKeySpace(cfg.Client, cfg.Prefix, cfg.DecodeItem, log)

	ttl := int64(math.Ceil(cfg.LeaseTTL.Seconds()))
	if err := m.announce(ctx, ttl); err != nil {
		return nil, err
	}
	if err := m.keepAlive(); err != nil {
		return nil, err
	}
	m.log.Info("member announced", "key", m.key, "lease", fmt.Sprintf("%x", m.lease), "ttl", ttl)
	return m, nil
}

// validateConfig checks what NewMember cannot work without.
func validateConfig(cfg Config) error {
	if cfg.Client == nil {
		return errors.New("allocator: Config.Client is nil")
	}
	if cleanPrefix(cfg.Prefix) == "" {
		return fmt.Errorf("allocator: Config.Prefix %q is empty", cfg.Prefix)
	}
	if err := ident.Check(cfg.Zone); err != nil {
		return fmt.Errorf("allocator: zone: %w", err)
	}
	if err := ident.Check(cfg.MemberID); err != nil {
		return fmt.Errorf("allocator: member id: %w", err)
	}
	if cfg.LeaseTTL <= 0 {
		return fmt.Errorf("allocator: lease TTL %s must be positive", cfg.LeaseTTL)
	}
	if cfg.Spec.ItemLimit < 0 {
		return fmt.Errorf("allocator: item limit %d is negative", cfg.Spec.ItemLimit)
	}
	return nil
}

// announce grants the member's lease (ttl seconds) and creates the member
// key under it only if the key is absent, so a second process with the same
// id fails with ErrMemberExists (naming the holder) instead of taking the
// first one's place; a key held by this process's previous incarnation is
// reclaimed instead. When the key cannot be created it revokes the lease.
func (m *Member) announce(ctx context.Context, ttl int64) error {
	grant, err := m.cfg.Client.Grant(ctx, ttl)
	if err != nil {
		etcdErrors.Inc()
		return fmt.Errorf("allocator: granting member lease (ttl %ds) for %s: %w", ttl, m.key, err)
	}
	m.lease = grant.ID
	val, err := json.Marshal(m.cfg.Spec)
	if err != nil {
		return fmt.Errorf("allocator: encoding member spec: %w", err)
	}
	for attempt := 0; ; attempt++ {
		resp, err := m.cfg.Client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(m.key), "=", 0)).
			Then(clientv3.OpPut(m.key, string(val), clientv3.WithLease(m.lease))).
			Else(clientv3.OpGet(m.key)).
			Commit()
		if err != nil {
			etcdErrors.Inc()
			m.revokeLease()
			return fmt.Errorf("allocator: announcing %s: %w", m.key, err)
		}
		if resp.Succeeded {
			m.createRev = resp.Header.Revision
			return nil
		}
		var holder *mvccpb.KeyValue
		if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) == 1 {
			holder = rr.Kvs[0]
		}
		if attempt == 0 && holder != nil && m.reclaim(ctx, holder) {
			continue
		}
		m.revokeLease()
		return fmt.Errorf("allocator: %w: %s is held by another process%s",
			ErrMemberExists, m.key, describeHolder(holder))
	}
}

// reclaim takes the member key back from this process's previous
// incarnation (same non-empty MemberSpec.Instance): it revokes the holder's
// lease, or deletes a key without one. It reports whether it did.
func (m *Member) reclaim(ctx context.Context, holder *mvccpb.KeyValue) bool {
	spec, err := decodeMemberSpec(holder.Value)
	if err != nil || m.cfg.Spec.Instance == "" || spec.Instance != m.cfg.Spec.Instance {
		return false
	}
	if holder.Lease != 0 {
		if _, err := m.cfg.Client.Revoke(ctx, clientv3.LeaseID(holder.Lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			etcdErrors.Inc()
			m.log.Warn("revoking the lease of this process's previous incarnation", "lease", fmt.Sprintf("%x", holder.Lease), "error", err)
			return false
		}
	} else if _, err := m.cfg.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(m.key), "=", holder.ModRevision)).
		Then(clientv3.OpDelete(m.key)).Commit(); err != nil {
		etcdErrors.Inc()
		return false
	}
	m.log.Info("reclaimed the member key from this process's previous incarnation", "key", m.key,
		"old_lease", fmt.Sprintf("%x", holder.Lease), "instance", spec.Instance)
	return true
}

// describeHolder says who holds a member key, for ErrMemberExists.
func describeHolder(kv *mvccpb.KeyValue) string {
	if kv == nil {
		return ""
	}
	d := fmt.Sprintf(" (lease %x, created at revision %d", kv.Lease, kv.CreateRevision)
	if spec, err := decodeMemberSpec(kv.Value); err == nil {
		d += fmt.Sprintf(", endpoint %s, version %s", spec.Endpoint, spec.Version)
	}
	return d + ")"
}

// keepAlive starts keeping the lease alive until Close; when the lease is
// lost the member's Done closes. If keep-alive cannot start it revokes the
// lease.
func (m *Member) keepAlive() error {
	kaCtx, cancel := context.WithCancel(context.Background())
	m.kaCancel = cancel
	ka, err := m.cfg.Client.KeepAlive(kaCtx, m.lease)
	if err != nil {
		cancel()
		etcdErrors.Inc()
		m.revokeLease()
		return fmt.Errorf("allocator: keeping lease %x alive: %w", m.lease, err)
	}
	go func() {
		defer close(m.kaDone)
		for range ka {
		}
		// The channel closes when the lease expired, was revoked, could not be
		// renewed within its TTL, or Close cancelled kaCtx.
		if kaCtx.Err() == nil {
			m.log.Error("member lease lost", "lease", fmt.Sprintf("%x", m.lease))
		}
		m.closeDone()
	}()
	return nil
}

func (m *Member) revokeLease() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := m.cfg.Client.Revoke(ctx, m.lease); err != nil {
		m.log.Warn("revoking member lease failed", "error", err)
	}
}

func (m *Member) closeDone() { m.doneOnce.Do(func() { close(m.done) }) }

// ID returns the member id.
func (m *Member) ID() string { return m.cfg.MemberID }

// Zone returns the member's zone.
func (m *Member) Zone() string { return m.cfg.Zone }

// Key returns the member's etcd key.
func (m *Member) Key() string { return m.key }

// LeaseID returns the member's lease.
func (m *Member) LeaseID() clientv3.LeaseID { return m.lease }

// KeySpace gives read access to the member's mirror (filled by Run).
func (m *Member) KeySpace() *KeySpace { return m.ks }

// Done is closed when the lease is lost (expired, revoked, or its key was
// deleted) or the member was closed. Every local assignment must stop then.
func (m *Member) Done() <-chan struct{} { return m.done }

// Local is a latest-value stream of this member's assignments: after Run
// starts it carries the first state, then every change (assignments, their
// statuses, or their items' values). Only the newest unread state is kept
// (buffer 1, a stale value is replaced). It is never closed; watch Done.
func (m *Member) Local() <-chan LocalState { return m.local }

func (m *Member) publishLocal(st LocalState) {
	select {
	case <-m.local:
	default:
	}
	m.local <- st
}

// UpdateStatus writes st as the value of assignment a, under this member's
// lease, only if the key still exists with a.CreateRevision (so a status
// never resurrects or overwrites a replaced assignment). It returns an error
// wrapping ErrAssignmentChanged when that compare fails. Error is cut by
// TruncateError.
func (m *Member) UpdateStatus(ctx context.Context, a Assignment, st ReplicaStatus) error {
	if a.Zone != m.cfg.Zone || a.Member != m.cfg.MemberID {
		return fmt.Errorf("allocator: updating status of %s/%s/%s/%d: not this member's assignment", a.Item, a.Zone, a.Member, a.Slot)
	}
	switch st.State {
	case StateIdle, StateBackfill, StateStandby, StatePrimary, StateFailed:
	default:
		return fmt.Errorf("allocator: updating status of item %s: unknown state %q", a.Item, st.State)
	}
	st.Error = TruncateError(st.Error)
	val, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("allocator: encoding status: %w", err)
	}
	key := AssignmentKey(m.prefix, a)
	resp, err := m.cfg.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", a.CreateRevision)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(m.lease))).
		Commit()
	if err != nil {
		etcdErrors.Inc()
		return fmt.Errorf("allocator: updating status of %s: %w", key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("allocator: updating status of %s (created at %d): %w", key, a.CreateRevision, ErrAssignmentChanged)
	}
	return nil
}

// SetExiting marks the member exiting in its key. The leader then moves its
// assignments elsewhere (make-before-break), and Run returns nil once this
// member holds nothing.
func (m *Member) SetExiting(ctx context.Context) error {
	m.mu.Lock()
	spec := m.spec
	spec.Exiting = true
	m.mu.Unlock()
	val, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("allocator: encoding member spec: %w", err)
	}
	resp, err := m.cfg.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(m.key), "=", m.createRev)).
		Then(clientv3.OpPut(m.key, string(val), clientv3.WithLease(m.lease))).
		Commit()
	if err != nil {
		etcdErrors.Inc()
		return fmt.Errorf("allocator: marking %s exiting: %w", m.key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("allocator: marking %s exiting: %w", m.key, ErrLeaseLost)
	}
	m.mu.Lock()
	if !m.spec.Exiting {
		m.spec = spec
		close(m.exitingCh)
	}
	m.mu.Unlock()
	m.log.Info("member exiting; waiting to be drained")
	return nil
}

func (m *Member) exiting() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.spec.Exiting
}

// Close stops keeping the lease alive and revokes it, which deletes the
// member key and every assignment written under it. Done is closed. Close
// is idempotent; Run should have returned (or its ctx be cancelled) first.
func (m *Member) Close() error {
	m.closeOnce.Do(func() {
		m.kaCancel()
		<-m.kaDone
		m.closeDone()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := m.cfg.Client.Revoke(ctx, m.lease); err != nil {
			etcdErrors.Inc()
			m.closeErr = fmt.Errorf("allocator: revoking lease of %s: %w", m.key, err)
		}
	})
	return m.closeErr
}

// Run loads the mirror, keeps it current, publishes Local states, and while
// this member is the leader schedules and converges assignments. It returns
// nil when ctx is done or when, after SetExiting, nothing is assigned to this
// member any more; it returns an error wrapping ErrLeaseLost when the lease
// is lost (Done is closed then). Run may be called once.
func (m *Member) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.running {
		m.mu.Unlock()
		return errors.New("allocator: Member.Run called twice")
	}
	m.running = true
	m.mu.Unlock()
	defer leaderGauge.Set(0)

	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Stop everything promptly when the lease is lost.
	go func() {
		select {
		case <-m.done:
			cancel()
		case <-ctx.Done():
		}
	}()

	if !m.loadMirror(ctx) {
		return m.runExit(parent)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = m.ks.Watch(ctx)
	}()
	defer wg.Wait()
	defer cancel()

	var last *LocalState
	var lastVer uint64
	conv := &m.conv
	conv.init(m)
	// Failed converge rounds are retried with the one policy: 100 ms
	// doubling to 2 s, reset by a round that succeeds.
	failed := retry.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second}.Start()
	for {
		upd := m.ks.Updated()
		if ctx.Err() != nil {
			return m.runExit(parent)
		}
		if _, ok := m.ks.Member(m.cfg.Zone, m.cfg.MemberID); !ok {
			m.log.Error("member key vanished from etcd; stopping", "key", m.key)
			m.closeDone()
			return fmt.Errorf("allocator: %s: member key deleted: %w", m.key, ErrLeaseLost)
		}
		// Local is rebuilt only when something of this member's changed:
		// every member wakes at every change of the cluster.
		if ver := m.ks.LocalVersion(m.cfg.Zone, m.cfg.MemberID); last == nil || ver != lastVer {
			st := m.ks.Local(m.cfg.Zone, m.cfg.MemberID)
			if last == nil || !sameLocal(*last, st) {
				m.publishLocal(st)
				last = &st
			}
			lastVer = ver
		}
		if m.exiting() && len(last.Assignments) == 0 {
			m.log.Info("member drained; exiting")
			return nil
		}
		if m.leaderRound(ctx, conv, failed) {
			continue
		}
		var due <-chan time.Time // a scheduled restart's time (restarts.go)
		var timer *time.Timer
		if !conv.wake.IsZero() {
			timer = time.NewTimer(time.Until(conv.wake))
			due = timer.C
		}
		select {
		case <-upd:
		case <-due:
		case <-ctx.Done():
		case <-m.exitingCh:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// loadMirror loads the mirror, retrying until it succeeds (true) or ctx is
// done (false): etcd may be briefly unreachable when the process starts.
func (m *Member) loadMirror(ctx context.Context) bool {
	err := retry.Policy{Initial: 100 * time.Millisecond, Max: time.Second}.Do(ctx, retry.Call{
		OnRetry: func(_ int, _ time.Duration, err error) { m.log.Warn("loading keyspace failed; retrying", "error", err) },
	}, func() error { return m.ks.Load(ctx) })
	return err == nil
}

// leaderRound runs a converge round if this member is the leader, and
// reports whether Run should loop again at once rather than wait for a
// change: after a round that wrote, or after a failed one (retried after a
// pause, not a hot loop).
func (m *Member) leaderRound(ctx context.Context, conv *converger, failed *retry.Backoff) (again bool) {
	if m.ks.Leader() != m.cfg.Zone+"/"+m.cfg.MemberID {
		leaderGauge.Set(0)
		conv.wake = time.Time{}
		return false
	}
	leaderGauge.Set(1)
	snap := m.ks.Snapshot()
	again, err := conv.round(ctx, snap)
	if err == nil && !again {
		m.idleRev.Store(snap.Revision)
	}
	if err != nil && ctx.Err() == nil {
		m.log.Warn("converge round failed; retrying", "error", err, "attempt", failed.Attempt()+1)
		_ = failed.Wait(ctx, nil) // ends early only with ctx
		return true
	}
	if err == nil {
		failed.Reset()
	}
	return again
}

// runExit is Run's result once its context ended: nil when the caller
// cancelled, ErrLeaseLost when the lease went first.
func (m *Member) runExit(parent context.Context) error {
	if parent.Err() != nil {
		return nil
	}
	select {
	case <-m.done:
		return fmt.Errorf("allocator: %s: %w", m.key, ErrLeaseLost)
	default:
	}
	return nil
}

// sameLocal compares two local states ignoring the revision.
func sameLocal(a, b LocalState) bool {
	if len(a.Assignments) != len(b.Assignments) || len(a.Items) != len(b.Items) {
		return false
	}
	for i := range a.Assignments {
		if a.Assignments[i] != b.Assignments[i] {
			return false
		}
	}
	return reflect.DeepEqual(a.Items, b.Items)
}
