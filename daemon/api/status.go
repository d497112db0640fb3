package api

import "time"

// StatusResponse is the body of GET /v1/status: this member and its replicas.
// It and StatusReplica stay exported as that endpoint's JSON contract, for Go
// clients that decode it.
type StatusResponse struct {
	Member   string `json:"member"`
	Zone     string `json:"zone"`
	Endpoint string `json:"endpoint"`
	// Session says the member holds a live etcd lease.
	Session bool `json:"session"`
	Leader  bool `json:"leader"`
	Exiting bool `json:"exiting"`
	// Ready is what /readyz answers.
	Ready    bool            `json:"ready"`
	Replicas []StatusReplica `json:"replicas"`
	// Version is the consumerd version the member runs (as its member spec
	// announces it); Build is the whole build line of `consumerd --version`.
	Version string `json:"version"`
	Build   string `json:"build,omitempty"`
	// UptimeSeconds is the time since serve started.
	UptimeSeconds float64 `json:"uptime_seconds"`
	// Etcd and NATS are the member's connections to its backends.
	Etcd EtcdHealth `json:"etcd"`
	NATS NATSHealth `json:"nats"`
}

// StatusReplica is one local replica in StatusResponse.
type StatusReplica struct {
	Shard string `json:"shard"`
	App   string `json:"app"`
	Slot  int    `json:"slot"`
	State string `json:"state"`
	Error string `json:"error,omitempty"`
	// Lag per source channel, as the primary last measured it.
	Lag map[string]int64 `json:"lag,omitempty"`
	// Offsets per source channel: the last message id consumed and committed.
	Offsets map[string]uint64 `json:"offsets,omitempty"`
	// Applied is the recovery-log id of the last record applied locally.
	Applied uint64 `json:"applied"`
	// ReplayTo is, during BACKFILL, the log id the replay catches up at.
	ReplayTo uint64 `json:"replay_to,omitempty"`
	// LastCommit is when the primary last applied a committed transaction
	// (primaries that committed since they took over).
	LastCommit *time.Time `json:"last_commit,omitempty"`
	// LastSnapshot is the shard's newest snapshot as the primary knows it
	// (primaries, once a snapshot exists).
	LastSnapshot *StatusSnapshot `json:"last_snapshot,omitempty"`
	// LogBytesSinceSnapshot is the recovery-log bytes the primary appended
	// since its last snapshot, or since it took over before its first
	// (PRIMARY replicas, when the member takes snapshots).
	LogBytesSinceSnapshot *int64 `json:"log_bytes_since_snapshot,omitempty"`
}

// StatusSnapshot is a snapshot in StatusReplica: its id, manifest object,
// creation time, total size and the recovery-log id it covers.
type StatusSnapshot struct {
	ID       string    `json:"id"`
	Manifest string    `json:"manifest"`
	Time     time.Time `json:"time"`
	Bytes    int64     `json:"bytes"`
	LogID    uint64    `json:"log_id"`
}

// EtcdHealth is the "etcd" object of /v1/status: the member's etcd session
// and client connection.
type EtcdHealth struct {
	// Session says the member holds a live etcd lease (as
	// StatusResponse.Session).
	Session bool `json:"session"`
	// Connection is the state of the etcd client's gRPC connection: IDLE,
	// CONNECTING, READY, TRANSIENT_FAILURE or SHUTDOWN ("" when unknown).
	Connection string `json:"connection,omitempty"`
	// LastError is why the member's last session ended (a lost lease, an
	// unreachable etcd), at LastErrorAt; absent when none ended since
	// serve started.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
}

// NATSHealth is the "nats" object of /v1/status: the WAL's connection.
type NATSHealth struct {
	// URL is the server the connection is on (password redacted), absent
	// while disconnected.
	URL string `json:"url,omitempty"`
	// Connected says the connection is up now.
	Connected bool `json:"connected"`
	// ServerVersion is the NATS server's version.
	ServerVersion string `json:"server_version,omitempty"`
}
