package shard

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/shard/rocksmem"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// ErrLeaseLost is returned by Service.Run when the member's lease was lost
// (or the member closed) while the service ran: every replica was halted.
var ErrLeaseLost = errors.New("shard: member lease lost")

// Defaults of Config's transaction caps.
const (
	// DefaultTxnMaxBytes caps the source bytes one transaction consumes.
	DefaultTxnMaxBytes = 4 << 20
	// DefaultTxnMaxMessages caps the source messages one transaction consumes.
	DefaultTxnMaxMessages = 100_000
	// DefaultLagInterval is how often a primary refreshes its source lag.
	DefaultLagInterval = time.Second
)

// Config configures a Service.
type Config struct {
	// Member is this process's allocator member: the service runs a replica
	// for each of its assignments and reports replica status through it.
	Member *allocator.Member
	// Opener opens recovery logs and source topic partitions.
	Opener wal.Opener
	// DataDir holds the shard databases, at <DataDir>/shards/<shard>/.
	DataDir string
	// Apps are the registered applications by name (App.Name).
	Apps map[string]App
	// Topics looks an output topic up (its partition count) for the apps'
	// Publisher.Publish and PublishTo; each primary asks once per topic.
	// The daemon gives EtcdTopics (the topic registry). Nil: publishing
	// fails.
	Topics func(ctx context.Context, name string) (topic.Description, error)
	// TxnMaxBytes and TxnMaxMessages cap a transaction's input (zero:
	// DefaultTxnMaxBytes, DefaultTxnMaxMessages).
	TxnMaxBytes    int
	TxnMaxMessages int
	// LagInterval is how often primaries refresh source lag (zero:
	// DefaultLagInterval).
	LagInterval time.Duration
	// LoadInterval is how often the service measures its primaries' load
	// and, when it changed enough, writes the member's load report, which
	// the allocator leader places primaries by (zero: DefaultLoadInterval;
	// negative: no reports).
	LoadInterval time.Duration
	// CommitsInFlight bounds the transactions the service's primaries
	// commit at once (zero: DefaultCommitsInFlight; see commitGate).
	CommitsInFlight int
	// Logger receives structured logs (nil: discard).
	Logger hclog.Logger
	// Snapshots, when set, enable snapshots, restore from them and
	// recovery-log truncation (see SnapshotOptions). Nil: none.
	Snapshots *SnapshotOptions
	// Terms, when set, adds the cluster's term base to primaries' terms and
	// raises it when a recovery log has seen higher terms than etcd's
	// revisions (etcd rebuilt from empty; see allocator.Terms). Nil: a
	// term is the slot-0 key's CreateRevision.
	Terms *allocator.Terms
	// Memory, when set, is the RocksDB memory every shard database of the
	// service shares (block cache and memtables; see rocksmem). It is the
	// caller's: close it after Run returned (every database is closed
	// then). Nil: each database sizes its own, without a bound on their sum.
	Memory *rocksmem.Budget
}

// ReplicaInfo is one local replica as Service.Status reports it.
type ReplicaInfo struct {
	Shard string                 `json:"shard"`
	App   string                 `json:"app"`
	Slot  int                    `json:"slot"`
	State allocator.ReplicaState `json:"state"`
	Error string                 `json:"error,omitempty"`
	// Lag is, per source channel, the last id in the channel minus the
	// offset committed by this primary (primaries only).
	Lag map[string]int64 `json:"lag,omitempty"`
	// Offsets is, per source channel, the id of the last message consumed
	// and committed by this primary (primaries only).
	Offsets map[string]message.MessageID `json:"offsets,omitempty"`
	// Applied is the recovery-log id of the last record applied to the
	// replica's database (0 before the first).
	Applied message.MessageID `json:"applied"`
	// ReplayTo is, during BACKFILL, the recovery log's last id when the
	// replay started: the replica catches up when Applied reaches it.
	ReplayTo message.MessageID `json:"replay_to,omitempty"`
	// LastCommitAt is when this primary last applied a committed
	// transaction (zero before its first; primaries only). Also the gauge
	// consumerd_shard_last_commit_timestamp_seconds{shard}.
	LastCommitAt time.Time `json:"last_commit_at,omitzero"`
	// LastSnapshot is the shard's newest snapshot as this primary knows it:
	// the one it took last, else the one the etcd pointer named when it
	// took over (nil: none, or snapshots are off; primaries only). Its
	// Created is the gauge consumerd_snapshot_last_success_timestamp_seconds.
	LastSnapshot *SnapshotInfo `json:"last_snapshot,omitempty"`
	// LogBytesSinceSnapshot is the recovery-log bytes this primary appended
	// since its last snapshot, or since it took over when it has taken none:
	// the figure snapshot_interval_bytes is compared with (0 for
	// non-primaries and when snapshots are off). Also the gauge
	// consumerd_recoverylog_bytes_since_snapshot{shard}.
	LogBytesSinceSnapshot int64 `json:"log_bytes_since_snapshot,omitempty"`
}

// Service runs this member's shard replicas: it follows the member's
// assignments (allocator.Member.Local), starts a replica per assignment,
// promotes standbys that are moved to slot 0, and stops replicas whose
// assignment is gone. See the package documentation for the lifecycle.
type Service struct {
	cfg    Config
	logger hclog.Logger
	clock  clock // what primaries' transaction loops and drainers time with
	lags   *lagRefresher
	loads  *loadReporter
	// commits is shared by the primaries' transaction loops.
	commits *commitGate

	mu       sync.Mutex
	replicas map[string]*replica
	stopping map[string]*replica // removed replicas not yet stopped, by shard
	wg       sync.WaitGroup      // replica goroutines and status writers
}

// NewService returns a service; call Run to start it.
func NewService(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.TxnMaxBytes <= 0 {
		cfg.TxnMaxBytes = DefaultTxnMaxBytes
	}
	if cfg.TxnMaxMessages <= 0 {
		cfg.TxnMaxMessages = DefaultTxnMaxMessages
	}
	if cfg.LagInterval <= 0 {
		cfg.LagInterval = DefaultLagInterval
	}
	if cfg.CommitsInFlight <= 0 {
		cfg.CommitsInFlight = DefaultCommitsInFlight
	}
	if cfg.LoadInterval == 0 {
		cfg.LoadInterval = DefaultLoadInterval
	}
	logger := cfg.Logger.Named("shard")
	return &Service{cfg: cfg, logger: logger, clock: realClock{}, lags: newLagRefresher(),
		loads:   newLoadReporter(cfg.Member, logger.Named("load")),
		commits: newCommitGate(cfg.CommitsInFlight), replicas: make(map[string]*replica), stopping: make(map[string]*replica)}
}

// Run follows the member's assignments until ctx is done (returns nil) or
// the member's lease is lost (returns ErrLeaseLost). Either way every
// replica is halted and its database closed before Run returns; local
// databases are kept for a fast restart.
func (s *Service) Run(ctx context.Context) error {
	if s.cfg.Member == nil || s.cfg.Opener == nil {
		return errors.New("shard service: Config.Member and Config.Opener are required")
	}
	if s.cfg.DataDir == "" {
		return errors.New("shard service: Config.DataDir is required")
	}
	for name, app := range s.cfg.Apps {
		if err := app.Validate(); err != nil {
			return fmt.Errorf("shard service: %w", err)
		}
		if name != app.Name {
			return fmt.Errorf("shard service: app registered as %q is named %q", name, app.Name)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		s.stopAll()
	}()
	s.wg.Add(1)
	go func() { // owned by Run: ends with ctx, waited by stopAll
		defer s.wg.Done()
		s.lags.run(ctx, s.cfg.LagInterval)
	}()
	if s.cfg.LoadInterval > 0 {
		s.wg.Add(1)
		go func() { // owned by Run: ends with ctx, waited by stopAll
			defer s.wg.Done()
			s.loads.run(ctx, s.cfg.LoadInterval)
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.cfg.Member.Done():
			if ctx.Err() != nil {
				return nil // shutting down: the member was closed after us
			}
			s.logger.Error("member lease lost: halting every replica")
			cancel()
			s.stopAll()
			return ErrLeaseLost
		case ls := <-s.cfg.Member.Local():
			s.reconcile(ctx, ls)
		}
	}
}

// stopAll cancels every replica and waits for them.
func (s *Service) stopAll() {
	s.mu.Lock()
	for id, r := range s.replicas {
		r.cancel()
		delete(s.replicas, id)
		defer r.clearState()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// reconcile starts, promotes, updates and stops replicas to match ls.
func (s *Service) reconcile(ctx context.Context, ls allocator.LocalState) {
	want := make(map[string]allocator.Assignment, len(ls.Assignments))
	for _, a := range ls.Assignments {
		if a.Member != s.cfg.Member.ID() || a.Zone != s.cfg.Member.Zone() {
			continue
		}
		want[a.Item] = a
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, r := range s.replicas {
		if _, ok := want[id]; !ok {
			s.logger.Info("assignment removed: stopping replica", "shard", id)
			s.removeLocked(id, r)
		}
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		a := want[id]
		raw := ls.Items[id]
		r, ok := s.replicas[id]
		if ok && !r.needsRestart(a, raw) {
			r.update(ctx, a, raw)
			continue
		}
		var prev *replica
		if ok {
			s.logger.Info("assignment or spec changed: restarting replica", "shard", id, "slot", a.Slot)
			s.removeLocked(id, r)
			prev = r
		}
		s.startLocked(ctx, a, raw, prev)
	}
}

func (s *Service) removeLocked(id string, r *replica) {
	r.cancel()
	delete(s.replicas, id)
	// Until it has stopped, a replica started again for the same shard (an
	// assignment removed and re-added, e.g. `shards unassign`) must wait
	// for it to release the database directory.
	s.stopping[id] = r
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		<-r.done
		r.clearState()
		s.mu.Lock()
		if s.stopping[id] == r {
			delete(s.stopping, id)
		}
		s.mu.Unlock()
	}()
}

// startLocked starts a replica for a. prev, if any, is a replica of the same
// shard that must release the database directory first.
func (s *Service) startLocked(ctx context.Context, a allocator.Assignment, raw []byte, prev *replica) {
	if prev == nil {
		prev = s.stopping[a.Item] // nil when no replica of the shard is stopping
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &replica{
		svc:       s,
		id:        a.Item,
		asg:       a,
		raw:       append([]byte(nil), raw...),
		logger:    s.logger.With("shard", a.Item),
		prev:      prev,
		cancel:    cancel,
		done:      make(chan struct{}),
		promoteCh: make(chan struct{}, 1),
	}
	if a.Slot == 0 {
		r.promoteCh <- struct{}{}
	}
	var spec *Spec
	var err error
	if len(raw) == 0 {
		err = fmt.Errorf("shard spec %q: missing from the member's view of etcd (deleted, or skipped as undecodable)", a.Item)
	} else {
		spec, err = decodeSpec(a.Item, raw)
	}
	if err == nil {
		app, ok := s.cfg.Apps[spec.App]
		if !ok {
			err = fmt.Errorf("shard spec %q: app: unknown app %q (registered: %v)", a.Item, spec.App, s.appNames())
		}
		r.spec, r.app = spec, app
	}
	s.replicas[a.Item] = r
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err != nil {
			defer close(r.done)
			r.fail(err)
			return
		}
		r.run(rctx)
	}()
}

func (s *Service) appNames() []string {
	out := make([]string, 0, len(s.cfg.Apps))
	for n := range s.cfg.Apps {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Status returns this member's replicas, sorted by shard.
func (s *Service) Status() []ReplicaInfo {
	s.mu.Lock()
	rs := make([]*replica, 0, len(s.replicas))
	for _, r := range s.replicas {
		rs = append(rs, r)
	}
	s.mu.Unlock()
	out := make([]ReplicaInfo, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Shard < out[j].Shard })
	return out
}

// Primary gives query access to a local shard primary: a read-only Shard
// whose Get and Database see committed state (Transaction is nil, Cache is
// nil). The database stays open until release is called; call it promptly,
// as it holds up the replica's shutdown. ok is false when shardID is not a
// running primary on this member.
func (s *Service) Primary(shardID string) (sh Shard, release func(), ok bool) {
	s.mu.Lock()
	r := s.replicas[shardID]
	s.mu.Unlock()
	if r == nil {
		return nil, nil, false
	}
	return r.queryAccess()
}

// App returns the registered app by name.
func (s *Service) App(name string) (App, bool) {
	a, ok := s.cfg.Apps[name]
	return a, ok
}

// sameSources reports whether two specs consume the same sources with the
// same app (a change of either restarts the replica).
func sameSources(a, b *Spec) bool {
	return a.App == b.App && reflect.DeepEqual(a.Sources, b.Sources)
}
