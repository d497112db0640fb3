package api

// ShardRow is one shard of `shards list -o json` (DESIGN §7). The row types
// (ShardRow, ReplicaRow, MemberRow) and the Status* values stay exported as
// the CLI's JSON contract, for Go programs that decode its output.
type ShardRow struct {
	ID string `json:"id"`
	// Status is the primary's state (PRIMARY, BACKFILL, FAILED, ...),
	// UNASSIGNED when the shard has no primary, DISABLED when disabled,
	// INVALID when its spec in etcd does not decode (Error says why).
	Status string `json:"status"`
	// Error is, for an INVALID shard, why its spec does not decode.
	Error string `json:"error,omitempty"`
	// Primary is the member id of slot 0, or ""; PrimaryZone its zone
	// (member ids are unique only within a zone).
	Primary     string       `json:"primary"`
	PrimaryZone string       `json:"primary_zone,omitempty"`
	Replicas    []ReplicaRow `json:"replicas"`
	// Lag is, per source channel, the channel's last message id minus the
	// offset the primary has consumed to. A channel is missing when it could
	// not be measured (no primary, primary or WAL unreachable).
	Lag map[string]int64 `json:"lag"`
	// Restarts is the leader's automatic restarts of the shard's FAILED
	// replicas (a spec with a restart policy), absent when there were none.
	Restarts *RestartRow `json:"restarts,omitempty"`
}

// RestartRow is a shard's restart record (allocator.RestartRecord).
type RestartRow struct {
	Attempts    int `json:"attempts"`
	MaxAttempts int `json:"max_attempts"`
	// NextAt is when the leader restarts the FAILED replica (RFC 3339),
	// empty when none is pending.
	NextAt string `json:"next_at,omitempty"`
	// Exhausted: the attempts are used up; the replica stays FAILED until
	// 'consumerd shards unassign --failed'.
	Exhausted   bool   `json:"exhausted,omitempty"`
	LastError   string `json:"last_error,omitempty"`
	LastRestart string `json:"last_restart,omitempty"`
}

// ReplicaRow is one replica of a ShardRow.
type ReplicaRow struct {
	Member string `json:"member"`
	Zone   string `json:"zone"`
	Slot   int    `json:"slot"`
	State  string `json:"state"`
	Error  string `json:"error,omitempty"`
}

// MemberRow is one member of `members list -o json` (DESIGN §7).
type MemberRow struct {
	ID        string `json:"id"`
	Zone      string `json:"zone"`
	Endpoint  string `json:"endpoint"`
	ItemLimit int    `json:"item_limit"`
	Exiting   bool   `json:"exiting"`
	Leader    bool   `json:"leader"`
}

// StatusUnassigned and StatusDisabled are ShardRow.Status values besides the
// replica states.
const (
	StatusUnassigned = "UNASSIGNED"
	StatusDisabled   = "DISABLED"
	StatusInvalid    = "INVALID"
)

// TopicRow is one topic of `topics list -o json`.
type TopicRow struct {
	Name       string `json:"name"`
	Partitions int    `json:"partitions"`
	// Messages is the number of messages stored in each partition (null when
	// NATS could not be asked).
	Messages []int64 `json:"messages"`
	// Unread are the partitions no shard reads.
	Unread []int `json:"unread"`
}

// ReadMessage is one line of `read -o json`. Key and payload are bytes:
// each is "key" / "payload" when valid UTF-8, else "key_b64" /
// "payload_b64" (standard base64), exactly one of each pair (see EncodeBytes).
type ReadMessage struct {
	Partition  int     `json:"partition"`
	ID         uint64  `json:"id"`
	Key        *string `json:"key,omitempty"`
	KeyB64     *string `json:"key_b64,omitempty"`
	Payload    *string `json:"payload,omitempty"`
	PayloadB64 *string `json:"payload_b64,omitempty"`
}
