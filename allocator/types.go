package allocator

// This file holds the allocator's public data types: the values stored in
// etcd under <root>/ and the decoded views that the shard layer consumes.

// MemberSpec is the value of <root>/members/<zone>/<member>, written under
// the member's lease.
type MemberSpec struct {
	// Endpoint is the member's HTTP base URL, e.g. "http://10.0.0.5:8080".
	Endpoint string `json:"endpoint"`
	// ItemLimit is the most items (shard replicas) the member will hold.
	ItemLimit int `json:"item_limit"`
	// Exiting asks the leader to drain the member (make-before-break).
	Exiting bool `json:"exiting"`
	// Version is the consumerd version the member runs.
	Version string `json:"version"`
	// Instance identifies the durable identity of the process (serve keeps
	// it in its data directory, which only one live process can hold). A
	// member whose key is held by the same non-empty Instance is that
	// process's previous incarnation (killed before its lease expired), and
	// NewMember reclaims the key at once instead of waiting out the lease.
	Instance string `json:"instance,omitempty"`
}

// ReplicaState is the lifecycle state of one assigned replica.
type ReplicaState string

const (
	StateIdle     ReplicaState = "IDLE"     // assigned, not started yet
	StateBackfill ReplicaState = "BACKFILL" // replaying the recovery log
	StateStandby  ReplicaState = "STANDBY"  // caught up, tailing the log
	StatePrimary  ReplicaState = "PRIMARY"  // consuming sources, writing the log
	StateFailed   ReplicaState = "FAILED"   // stopped with Error until unassigned
)

// Consistent reports whether a replica in this state counts towards an item's
// replication for make-before-break (STANDBY or PRIMARY).
func (s ReplicaState) Consistent() bool { return s == StateStandby || s == StatePrimary }

// ReplicaStatus is the value of <root>/assign/<item>/<zone>/<member>/<slot>,
// written under the assigned member's lease.
type ReplicaStatus struct {
	State ReplicaState `json:"state"`
	// Error is set when State is FAILED (truncated to a few KiB).
	Error string `json:"error,omitempty"`
	// Revision is an application-defined progress marker (e.g. the recovery-log
	// id applied); informational.
	Revision int64 `json:"revision,omitempty"`
}

// Assignment is one decoded assignment key.
type Assignment struct {
	Item   string
	Zone   string
	Member string
	// Slot 0 is the primary; 1.. are hot standbys.
	Slot   int
	Status ReplicaStatus
	// CreateRevision and ModRevision of the etcd key. The CreateRevision of a
	// slot-0 key is the primary's fencing term: it only grows, since a
	// promotion creates a new slot-0 key.
	CreateRevision int64
	ModRevision    int64
}

// Item is an allocatable unit (a shard) as decoded from <root>/items/<id>.
type Item interface {
	// DesiredReplication is the number of replicas wanted: 1 + hot standbys,
	// or 0 when the item is disabled.
	DesiredReplication() int
}

// MemberInfo is one decoded member key of the mirror.
type MemberInfo struct {
	Zone, ID string
	Spec     MemberSpec
	// Lease is the member's etcd lease (the member key's Lease field); the
	// leader writes the member's assignments under it.
	Lease          int64
	CreateRevision int64
	ModRevision    int64
}

// Key returns "zone/id", the member's display name.
func (m MemberInfo) Key() string { return m.Zone + "/" + m.ID }

// ItemInfo is one decoded item key of the mirror.
type ItemInfo struct {
	ID string
	// Raw is the item's JSON value as stored.
	Raw         []byte
	Item        Item
	ModRevision int64
}

// Snapshot is a consistent copy of the mirror at Revision.
type Snapshot struct {
	Revision int64
	// Members sorted by (zone, id).
	Members []MemberInfo
	Items   map[string]ItemInfo
	// Assignments sorted by (item, slot, zone, member).
	Assignments []Assignment
	// Undecodable are assignment keys whose key parses but whose value does
	// not (Status is zero): they are not assignments, but their keys are
	// taken, so the leader does not write a key that already exists.
	Undecodable []Assignment
	// InvalidItems are the ids of item keys whose value does not decode,
	// with the error: not items (absent from Items), but they exist, and
	// whatever is built from Items misses them.
	InvalidItems map[string]string
	// Leader is "zone/member" of the member with the lowest CreateRevision,
	// or "" when there are no members.
	Leader string
	// Restarts are the leader's restart records by item id (restarts.go).
	Restarts map[string]RestartRecord
	// Loads are the members' load reports by "zone/member" (load.go).
	Loads map[string]LoadReport
}

// LocalState is the part of the mirror that concerns one member: its
// assignments (sorted by item, slot) and the raw JSON of their items.
type LocalState struct {
	Revision    int64
	Assignments []Assignment
	Items       map[string][]byte
}

// genericItem is the default Item decoding: {"hot_standbys":k,"disable":b}.
type genericItem struct {
	HotStandbys int  `json:"hot_standbys"`
	Disable     bool `json:"disable"`
}

func (g genericItem) DesiredReplication() int {
	if g.Disable {
		return 0
	}
	return 1 + g.HotStandbys
}
