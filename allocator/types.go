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
