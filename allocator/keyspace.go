package allocator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/consumerd/consumerd/internal/retry"
	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// KeySpace is a decoded, in-memory mirror of everything under the root
// prefix. Load fills it at one revision; Watch then applies every change
// through a single prefix watch, resuming after disconnects and reloading when
// the resume revision was compacted. Keys or values that do not decode are
// logged (with the key) and skipped: they never stop the mirror.
//
// All methods are safe for concurrent use.
type KeySpace struct {
	client     *clientv3.Client
	prefix     string
	decodeItem func(id string, raw []byte) (Item, error)
	log        hclog.Logger

	mu          sync.RWMutex
	revision    int64
	loaded      bool
	members     map[string]MemberInfo // by key
	items       map[string]ItemInfo   // by id
	assignments map[string]Assignment // by key
	// byMember indexes assignments by member ("zone/id" → their keys), so
	// a member's Local costs its own assignments, not the cluster's: every
	// member reads it at every change of the mirror.
	byMember map[string]map[string]struct{}
	// localVer counts changes to each member's assignments (by "zone/id"),
	// itemsVer changes to any item, loads reloads: their sum is
	// LocalVersion, so a member skips rebuilding Local when nothing of
	// its own changed.
	localVer        map[string]uint64
	itemsVer, loads uint64
	// badAssign holds assignment keys whose key parses but whose value does
	// not decode: skipped, but their slots are taken.
	badAssign map[string]Assignment
	// badItems holds, by id, the decode error of item keys whose id parses
	// but whose value does not: skipped, but reported (Snapshot.InvalidItems).
	badItems map[string]string
	// restarts holds, by item id, the leader's restart records.
	restarts map[string]RestartRecord
	// reports holds the members' load reports by "zone/member".
	reports map[string]LoadReport
	changed chan struct{} // closed and replaced on every update
}

// decoded is what decodeInto fills.
type decoded struct {
	members     map[string]MemberInfo
	items       map[string]ItemInfo
	assignments map[string]Assignment
	byMember    map[string]map[string]struct{}
	badAssign   map[string]Assignment
	badItems    map[string]string
	restarts    map[string]RestartRecord
	reports     map[string]LoadReport
}

// newDecoded returns empty maps for a Load to fill.
func newDecoded() decoded {
	return decoded{members: map[string]MemberInfo{}, items: map[string]ItemInfo{}, assignments: map[string]Assignment{},
		byMember: map[string]map[string]struct{}{}, badAssign: map[string]Assignment{}, badItems: map[string]string{},
		restarts: map[string]RestartRecord{}, reports: map[string]LoadReport{}}
}

// NewKeySpace returns an empty mirror of prefix. decodeItem nil means
// DecodeGenericItem; logger nil means no logging.
func NewKeySpace(client *clientv3.Client, prefix string, decodeItem func(id string, raw []byte) (Item, error), logger hclog.Logger) *KeySpace {
	if decodeItem == nil {
		decodeItem = DecodeGenericItem
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &KeySpace{
		client:      client,
		prefix:      cleanPrefix(prefix),
		decodeItem:  decodeItem,
		log:         logger,
		members:     map[string]MemberInfo{},
		items:       map[string]ItemInfo{},
		assignments: map[string]Assignment{},
		byMember:    map[string]map[string]struct{}{},
		localVer:    map[string]uint64{},
		badAssign:   map[string]Assignment{},
		badItems:    map[string]string{},
		restarts:    map[string]RestartRecord{},
		reports:     map[string]LoadReport{},
		changed:     make(chan struct{}),
	}
}

// Prefix returns the root prefix (without a trailing slash).
func (ks *KeySpace) Prefix() string { return ks.prefix }

// Load replaces the mirror with a read of the whole root at the current revision.
func (ks *KeySpace) Load(ctx context.Context) error {
	resp, err := ks.client.Get(ctx, ks.prefix+"/", clientv3.WithPrefix())
	if err != nil {
		etcdErrors.Inc()
		return fmt.Errorf("loading %s/: %w", ks.prefix, err)
	}
	d := newDecoded()
	for _, kv := range resp.Kvs {
		ks.decodeInto(kv, d)
	}
	ks.mu.Lock()
	ks.members, ks.items, ks.assignments, ks.badAssign, ks.badItems = d.members, d.items, d.assignments, d.badAssign, d.badItems
	ks.byMember = d.byMember
	ks.loads++
	ks.restarts, ks.reports = d.restarts, d.reports
	ks.revision = resp.Header.Revision
	ks.loaded = true
	ks.notifyLocked()
	ks.mu.Unlock()
	return nil
}

// Watch applies changes after the loaded revision until ctx is done (then it
// returns ctx.Err()). It calls Load first if the mirror was never loaded. It
// survives disconnects (resuming at the next revision) and compaction
// (reloading); other errors are logged and retried with backoff.
func (ks *KeySpace) Watch(ctx context.Context) error {
	ks.mu.RLock()
	loaded := ks.loaded
	ks.mu.RUnlock()
	// One retry policy (internal/retry): 50 ms doubling to 2 s, with
	// jitter, reset after every watch that made progress.
	b := retry.Policy{Initial: 50 * time.Millisecond, Max: 2 * time.Second}.Start()
	wait := func() error { return b.Wait(ctx, nil) }
	for !loaded {
		if err := ks.Load(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			ks.log.Warn("loading keyspace failed; retrying", "prefix", ks.prefix, "error", err)
			if err := wait(); err != nil {
				return err
			}
			continue
		}
		loaded = true
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		compacted, err := ks.watchOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if compacted {
			ks.log.Info("watch revision compacted; reloading keyspace", "prefix", ks.prefix)
			if err := ks.Load(ctx); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				ks.log.Warn("reloading keyspace failed; retrying", "prefix", ks.prefix, "error", err)
				if err := wait(); err != nil {
					return err
				}
			}
			continue
		}
		if err != nil {
			etcdErrors.Inc()
			ks.log.Warn("keyspace watch interrupted; resuming", "prefix", ks.prefix, "error", err)
			if err := wait(); err != nil {
				return err
			}
			continue
		}
		b.Reset()
	}
}

// watchOnce runs one watch from the mirror's revision+1 until it ends.
func (ks *KeySpace) watchOnce(ctx context.Context) (compacted bool, err error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	ks.mu.RLock()
	rev := ks.revision
	ks.mu.RUnlock()
	wch := ks.client.Watch(wctx, ks.prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1),
		clientv3.WithProgressNotify())
	for resp := range wch {
		if resp.CompactRevision != 0 {
			return true, nil
		}
		if err := resp.Err(); err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				return true, nil
			}
			return false, fmt.Errorf("watching %s/ from revision %d: %w", ks.prefix, rev+1, err)
		}
		ks.apply(resp)
	}
	return false, errors.New("watch channel closed")
}

func (ks *KeySpace) apply(resp clientv3.WatchResponse) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for _, ev := range resp.Events {
		key := string(ev.Kv.Key)
		delete(ks.badAssign, key)
		if id, ok := strings.CutPrefix(key, RestartsPrefix(ks.prefix)); ok {
			delete(ks.restarts, id)
		}
		if mk, err := parseLoadKey(ks.prefix, key); err == nil {
			delete(ks.reports, mk)
		}
		ks.dropAssignmentLocked(key)
		if ev.Type == mvccpb.DELETE {
			delete(ks.members, key)
			if id, err := parseItemKey(ks.prefix, key); err == nil {
				delete(ks.items, id)
				delete(ks.badItems, id)
				ks.itemsVer++
			}
			continue
		}
		// A put replaces the old value; if the new value does not decode the
		// key is dropped from the mirror (and logged).
		delete(ks.members, key)
		if id, err := parseItemKey(ks.prefix, key); err == nil {
			delete(ks.items, id)
			delete(ks.badItems, id)
			ks.itemsVer++
		}
		ks.decodeInto(ev.Kv, decoded{members: ks.members, items: ks.items, assignments: ks.assignments,
			byMember: ks.byMember, badAssign: ks.badAssign, badItems: ks.badItems, restarts: ks.restarts, reports: ks.reports})
		if a, ok := ks.assignments[key]; ok {
			ks.localVer[a.Zone+"/"+a.Member]++
		}
	}
	if r := resp.Header.Revision; r > ks.revision {
		ks.revision = r
	}
	ks.notifyLocked()
}

func (ks *KeySpace) notifyLocked() {
	close(ks.changed)
	ks.changed = make(chan struct{})
}

// decodeInto decodes one key/value into the maps, logging and skipping what
// does not decode.
func (ks *KeySpace) decodeInto(kv *mvccpb.KeyValue, d decoded) {
	key := string(kv.Key)
	rest := strings.TrimPrefix(key, ks.prefix)
	switch {
	case strings.HasPrefix(rest, membersDir):
		zone, id, err := parseMemberKey(ks.prefix, key)
		if err == nil {
			var spec MemberSpec
			if spec, err = decodeMemberSpec(kv.Value); err == nil {
				d.members[key] = MemberInfo{Zone: zone, ID: id, Spec: spec, Lease: kv.Lease,
					CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision}
				return
			}
		}
		ks.skip(key, err)
	case strings.HasPrefix(rest, itemsDir):
		id, err := parseItemKey(ks.prefix, key)
		if err == nil {
			var it Item
			if it, err = ks.decodeItem(id, kv.Value); err == nil {
				if it == nil {
					err = errors.New("decoder returned no item")
				} else {
					d.items[id] = ItemInfo{ID: id, Raw: append([]byte(nil), kv.Value...), Item: it, ModRevision: kv.ModRevision}
					return
				}
			}
			d.badItems[id] = err.Error()
		}
		ks.skip(key, err)
	case strings.HasPrefix(rest, assignDir):
		a, err := parseAssignmentKey(ks.prefix, key)
		if err == nil {
			a.CreateRevision, a.ModRevision = kv.CreateRevision, kv.ModRevision
			if a.Status, err = DecodeReplicaStatus(kv.Value); err == nil {
				d.assignments[key] = a
				mk := a.Zone + "/" + a.Member
				if d.byMember[mk] == nil {
					d.byMember[mk] = map[string]struct{}{}
				}
				d.byMember[mk][key] = struct{}{}
				return
			}
			d.badAssign[key] = a
		}
		ks.skip(key, err)
	case strings.HasPrefix(rest, restartsDir):
		id := strings.TrimPrefix(rest, restartsDir)
		r, err := DecodeRestartRecord(kv.Value)
		if err == nil {
			r.ModRevision = kv.ModRevision
			d.restarts[id] = r
			return
		}
		// The leader writes a new record over it at the item's next failure.
		ks.skip(key, err)
	case strings.HasPrefix(rest, loadsDir):
		mk, err := parseLoadKey(ks.prefix, key)
		if err == nil {
			var r LoadReport
			if r, err = DecodeLoadReport(kv.Value); err == nil {
				d.reports[mk] = r
				return
			}
		}
		// The leader places without it (by count) until the member's next report.
		ks.skip(key, err)
	default:
		// Other subtrees (e.g. snapshots/) belong to other layers.
	}
}

// dropAssignmentLocked removes assignment key (if any) from the mirror and
// its index.
func (ks *KeySpace) dropAssignmentLocked(key string) {
	a, ok := ks.assignments[key]
	if !ok {
		return
	}
	delete(ks.assignments, key)
	mk := a.Zone + "/" + a.Member
	ks.localVer[mk]++
	if keys := ks.byMember[mk]; keys != nil {
		delete(keys, key)
		if len(keys) == 0 {
			delete(ks.byMember, mk)
		}
	}
}

func (ks *KeySpace) skip(key string, err error) {
	malformedKeys.Inc()
	ks.log.Warn("skipping undecodable key", "key", key, "error", err)
}

// Revision is the etcd revision the mirror reflects.
func (ks *KeySpace) Revision() int64 {
	ks.mu.RLock()
	defer ks.mu.RUnlock()
	return ks.revision
}

// Updated returns a channel closed at the next change of the mirror
// (including a bare revision advance from a progress notification).
func (ks *KeySpace) Updated() <-chan struct{} {
	ks.mu.RLock()
	defer ks.mu.RUnlock()
	return ks.changed
}

// WaitForRevision blocks until the mirror reflects at least rev (so a reader
// sees its own writes), or ctx is done.
func (ks *KeySpace) WaitForRevision(ctx context.Context, rev int64) error {
	for {
		ks.mu.RLock()
		cur, ch := ks.revision, ks.changed
		ks.mu.RUnlock()
		if cur >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for keyspace revision %d (at %d): %w", rev, cur, ctx.Err())
		}
	}
}

// Snapshot returns a consistent copy of the mirror.
func (ks *KeySpace) Snapshot() Snapshot {
	ks.mu.RLock()
	s := Snapshot{
		Revision:    ks.revision,
		Members:     make([]MemberInfo, 0, len(ks.members)),
		Items:       make(map[string]ItemInfo, len(ks.items)),
		Assignments: make([]Assignment, 0, len(ks.assignments)),
	}
	for _, m := range ks.members {
		s.Members = append(s.Members, m)
	}
	for id, it := range ks.items {
		s.Items[id] = it
	}
	for _, a := range ks.assignments {
		s.Assignments = append(s.Assignments, a)
	}
	for _, a := range ks.badAssign {
		s.Undecodable = append(s.Undecodable, a)
	}
	if len(ks.restarts) > 0 {
		s.Restarts = make(map[string]RestartRecord, len(ks.restarts))
		for id, r := range ks.restarts {
			s.Restarts[id] = r
		}
	}
	if len(ks.reports) > 0 {
		s.Loads = make(map[string]LoadReport, len(ks.reports))
		for mk, r := range ks.reports {
			s.Loads[mk] = r
		}
	}
	if len(ks.badItems) > 0 {
		s.InvalidItems = make(map[string]string, len(ks.badItems))
		for id, e := range ks.badItems {
			s.InvalidItems[id] = e
		}
	}
	ks.mu.RUnlock()

	sort.Slice(s.Members, func(i, j int) bool {
		a, b := s.Members[i], s.Members[j]
		if a.Zone != b.Zone {
			return a.Zone < b.Zone
		}
		return a.ID < b.ID
	})
	sortAssignments(s.Assignments)
	sortAssignments(s.Undecodable)
	var lead *MemberInfo
	for i := range s.Members {
		if lead == nil || s.Members[i].CreateRevision < lead.CreateRevision {
			lead = &s.Members[i]
		}
	}
	if lead != nil {
		s.Leader = lead.Key()
	}
	return s
}

// Leader returns "zone/member" of the member with the lowest CreateRevision,
// or "" when there are no members.
func (ks *KeySpace) Leader() string {
	ks.mu.RLock()
	defer ks.mu.RUnlock()
	var lead *MemberInfo
	for _, m := range ks.members {
		if lead == nil || m.CreateRevision < lead.CreateRevision {
			m := m
			lead = &m
		}
	}
	if lead == nil {
		return ""
	}
	return lead.Key()
}

// LocalVersion changes (grows) at every change of the mirror that may change
// Local(zone, id): one of the member's assignments, any item, a reload.
func (ks *KeySpace) LocalVersion(zone, id string) uint64 {
	ks.mu.RLock()
	defer ks.mu.RUnlock()
	return ks.localVer[zone+"/"+id] + ks.itemsVer + ks.loads
}

// Local returns the assignments of member zone/id and their items' raw JSON.
func (ks *KeySpace) Local(zone, id string) LocalState {
	ks.mu.RLock()
	st := LocalState{Revision: ks.revision, Items: map[string][]byte{}}
	for key := range ks.byMember[zone+"/"+id] {
		a := ks.assignments[key]
		st.Assignments = append(st.Assignments, a)
		if it, ok := ks.items[a.Item]; ok {
			st.Items[a.Item] = it.Raw
		}
	}
	ks.mu.RUnlock()
	sortAssignments(st.Assignments)
	return st
}

// Member returns the mirror's member zone/id.
func (ks *KeySpace) Member(zone, id string) (MemberInfo, bool) {
	ks.mu.RLock()
	defer ks.mu.RUnlock()
	m, ok := ks.members[MemberKey(ks.prefix, zone, id)]
	return m, ok
}

func sortAssignments(as []Assignment) {
	sort.Slice(as, func(i, j int) bool {
		a, b := as[i], as[j]
		if a.Item != b.Item {
			return a.Item < b.Item
		}
		if a.Slot != b.Slot {
			return a.Slot < b.Slot
		}
		if a.Zone != b.Zone {
			return a.Zone < b.Zone
		}
		return a.Member < b.Member
	})
}
