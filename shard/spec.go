package shard

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/internal/ident"
	"github.com/consumerd/consumerd/topic"
)

// Defaults applied to a Spec whose transaction durations are zero.
const (
	// DefaultMinTxnDuration is the default min_txn_duration: zero, so a
	// transaction closes as soon as its input stalls (no message is ready)
	// and the previous commit has completed. Under load, the two-deep
	// pipeline makes transactions grow on their own while a commit is in
	// flight, so no minimum is needed for throughput.
	DefaultMinTxnDuration = 0
	// DefaultMaxTxnDuration is the default max_txn_duration: one second. It
	// bounds how long a transaction keeps consuming while its input never
	// stalls, and so bounds the latency of a commit and the work a failure
	// throws away.
	DefaultMaxTxnDuration = time.Second
	// MaxHotStandbys bounds hot_standbys in a spec.
	MaxHotStandbys = 16
)

// Spec is a shard's specification, stored as JSON at <root>/items/<shard>
// (DESIGN §5). It is the allocator's item: DesiredReplication says how many
// replicas (one primary plus hot standbys) the shard wants.
type Spec struct {
	// ID is the shard id ([A-Za-z0-9._-]+), e.g. "wordcount-0002".
	ID string `json:"id"`
	// App names the registered application (App.Name) that runs the shard.
	App string `json:"app"`
	// Sources are the topic partitions the shard consumes. Every source is
	// read from after the offset committed with the shard's state.
	Sources []Source `json:"sources"`
	// HotStandbys is the number of standby replicas that tail the recovery
	// log, ready to take over (0..MaxHotStandbys).
	HotStandbys int `json:"hot_standbys"`
	// MinTxnDuration is the least time a transaction stays open while its
	// input stalls. Zero (the default) closes a transaction at the first
	// stall.
	MinTxnDuration Duration `json:"min_txn_duration"`
	// MaxTxnDuration is the most time a transaction consumes before it
	// closes. Zero means DefaultMaxTxnDuration (1s).
	MaxTxnDuration Duration `json:"max_txn_duration"`
	// Disable stops the shard: it is assigned to no member.
	Disable bool `json:"disable"`
	// Labels are free-form key/value pairs for operators.
	Labels map[string]string `json:"labels,omitempty"`
	// SnapshotIntervalBytes is how many bytes of recovery log the primary
	// writes between snapshots (0: DefaultSnapshotIntervalBytes, 64 MiB).
	// Snapshots are taken only when the service has a snapshot store
	// (Config.Snapshots).
	SnapshotIntervalBytes int64 `json:"snapshot_interval_bytes,omitempty"`
	// SnapshotsKept is how many snapshots are retained (0:
	// DefaultSnapshotsKept, 2); the recovery log is truncated before the
	// oldest one kept.
	SnapshotsKept int `json:"snapshots_kept,omitempty"`
	// LogResetTerm, written by 'consumerd shards reset', accepts that the
	// shard's recovery log lost records: a local database built before the
	// reset (its position's term is below this one, which is above every
	// term given out then) that is ahead of the log is set aside, and the
	// shard rebuilt from what the log has. 0 (the default): such a
	// database fails the shard (recoverylog.ErrLogBehind).
	LogResetTerm int64 `json:"log_reset_term,omitempty"`
	// SourceResets, written by 'consumerd shards accept-source', accept that
	// a source lost messages the shard had not read (SourceReset).
	SourceResets []SourceReset `json:"source_resets,omitempty"`
	// OutputDrops, written by 'consumerd shards outputs --drop', drop
	// committed outputs that were never published (OutputDrop).
	OutputDrops []OutputDrop `json:"output_drops,omitempty"`
	// Restart, when set, has the allocator leader restart a FAILED replica
	// by itself after a backoff (allocator.RestartPolicy). Absent (the
	// default): a FAILED replica stays FAILED until a person runs
	// 'consumerd shards unassign --failed'.
	Restart *RestartSpec `json:"restart,omitempty"`
}

// RestartSpec is a shard's restart policy as written in its spec.
type RestartSpec struct {
	// MaxAttempts is the most automatic restarts in a row (at least 1).
	MaxAttempts int `json:"max_attempts"`
	// InitialBackoff is the wait before the first restart (0:
	// DefaultRestartInitialBackoff); each next wait doubles.
	InitialBackoff Duration `json:"initial_backoff"`
	// MaxBackoff caps the wait (0: DefaultRestartMaxBackoff).
	MaxBackoff Duration `json:"max_backoff"`
}

// Defaults of a RestartSpec.
const (
	DefaultRestartInitialBackoff = time.Second
	DefaultRestartMaxBackoff     = 5 * time.Minute
)

// restartFields are the JSON field names of RestartSpec.
var restartFields = map[string]bool{"max_attempts": true, "initial_backoff": true, "max_backoff": true}

// policy is the RestartSpec with its defaults applied.
func (r *RestartSpec) policy() allocator.RestartPolicy {
	p := allocator.RestartPolicy{MaxAttempts: r.MaxAttempts, InitialBackoff: time.Duration(r.InitialBackoff), MaxBackoff: time.Duration(r.MaxBackoff)}
	if p.InitialBackoff == 0 {
		p.InitialBackoff = DefaultRestartInitialBackoff
	}
	if p.MaxBackoff == 0 {
		p.MaxBackoff = max(DefaultRestartMaxBackoff, p.InitialBackoff)
	}
	return p
}

// RestartPolicy makes *Spec an allocator.Restartable: the spec's restart
// policy, or false when it has none.
func (s *Spec) RestartPolicy() (allocator.RestartPolicy, bool) {
	if s.Restart == nil {
		return allocator.RestartPolicy{}, false
	}
	return s.Restart.policy(), true
}

// UnmarshalJSON decodes a restart policy, naming the field of a bad
// duration.
func (r *RestartSpec) UnmarshalJSON(b []byte) error {
	type plain RestartSpec
	aux := struct {
		*plain
		Initial json.RawMessage `json:"initial_backoff"`
		Max     json.RawMessage `json:"max_backoff"`
	}{plain: (*plain)(r)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	return decodeDurations([]durationField{{"restart.initial_backoff", aux.Initial, &r.InitialBackoff}, {"restart.max_backoff", aux.Max, &r.MaxBackoff}})
}

// durationField is a Duration field of a spec and its raw JSON.
type durationField struct {
	name string
	raw  json.RawMessage
	dst  *Duration
}

// decodeDurations sets each field from its raw JSON (absent or null: 0),
// naming the field of a bad one.
func decodeDurations(fields []durationField) error {
	for _, f := range fields {
		*f.dst = 0
		if len(f.raw) == 0 || string(f.raw) == "null" {
			continue
		}
		if err := f.dst.UnmarshalJSON(f.raw); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	return nil
}

// SourceReset is an operator's acceptance of a source that lost messages
// the shard had not read (a stream deleted and re-created, purged, trimmed
// by limits, restored from an older copy): read the source after After in
// the channel's life Incarnation, as if the shard had consumed up to it. A
// primary applies it when it takes over, only while the channel is still
// that incarnation and only once: it records Term with the source's offset
// in the state, and a reset whose Term is not above the recorded one is
// inert. A later loss of the same source fails the shard again.
type SourceReset struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	// Incarnation is the life of the channel the reset is for
	// (wal.Bounds.Incarnation when it was written).
	Incarnation string `json:"incarnation"`
	// After is the id to read after: the channel's first id minus one
	// (--from start) or its last id (--from end) when it was written.
	After uint64 `json:"after"`
	// Term is above every term given out when the reset was written (the
	// term base plus etcd's revision plus one), so it is above the reset
	// term any state recorded before.
	Term int64 `json:"term"`
	// From says what the operator chose: "start" or "end".
	From string `json:"from,omitempty"`
}

// Channel is the WAL channel of the reset's source.
func (r SourceReset) Channel() string { return topic.ChannelName(r.Topic, r.Partition) }

// SourceReset is the spec's reset of the source on channel ch, or nil.
func (s *Spec) SourceReset(ch string) *SourceReset {
	for i := range s.SourceResets {
		if s.SourceResets[i].Channel() == ch {
			return &s.SourceResets[i]
		}
	}
	return nil
}

// validateSourceResets checks that each reset names one of the spec's
// sources, once, with a term.
func (s *Spec) validateSourceResets(bad func(field, format string, args ...any) error) error {
	sources := make(map[Source]bool, len(s.Sources))
	for _, src := range s.Sources {
		sources[src] = true
	}
	seen := make(map[Source]int, len(s.SourceResets))
	for i, r := range s.SourceResets {
		field := fmt.Sprintf("source_resets[%d]", i)
		src := Source{Topic: r.Topic, Partition: r.Partition}
		switch j, dup := seen[src]; {
		case !sources[src]:
			return bad(field, "%s is not one of the shard's sources", src.Channel())
		case dup:
			return bad(field, "duplicates source_resets[%d] (%s)", j, src.Channel())
		case r.Term <= 0:
			return bad(field+".term", "must be positive, got %d", r.Term)
		case r.From != "" && r.From != "start" && r.From != "end":
			return bad(field+".from", `must be "start" or "end", got %q`, r.From)
		}
		seen[src] = i
	}
	return nil
}

// Source is one topic partition a shard consumes.
type Source struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
}

// Channel is the WAL channel of the source (topic.ChannelName).
func (s Source) Channel() string { return topic.ChannelName(s.Topic, s.Partition) }

// Validate checks the spec and returns an error naming the first bad field,
// e.g. `shard spec "wc-1": sources[1].partition: must be in 0..9999, got -2`.
func (s *Spec) Validate() error {
	if s == nil {
		return errors.New("shard spec: is nil")
	}
	name := s.ID
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("shard spec %q: %s: %s", name, field, fmt.Sprintf(format, args...))
	}
	if err := ident.Check(s.ID); err != nil {
		return bad("id", "%v", err)
	}
	if err := ident.Check(s.App); err != nil {
		return bad("app", "%v", err)
	}
	if len(s.Sources) == 0 {
		return bad("sources", "must name at least one {topic, partition}")
	}
	seen := make(map[Source]int, len(s.Sources))
	for i, src := range s.Sources {
		if err := ident.Check(src.Topic); err != nil {
			return bad(fmt.Sprintf("sources[%d].topic", i), "%v", err)
		}
		if src.Partition < 0 || src.Partition >= topic.MaxPartitions {
			return bad(fmt.Sprintf("sources[%d].partition", i), "must be in 0..%d, got %d", topic.MaxPartitions-1, src.Partition)
		}
		if j, dup := seen[src]; dup {
			return bad(fmt.Sprintf("sources[%d]", i), "duplicates sources[%d] (%s)", j, src.Channel())
		}
		seen[src] = i
	}
	if s.HotStandbys < 0 || s.HotStandbys > MaxHotStandbys {
		return bad("hot_standbys", "must be in 0..%d, got %d", MaxHotStandbys, s.HotStandbys)
	}
	if s.MinTxnDuration < 0 {
		return bad("min_txn_duration", "must not be negative, got %s", s.MinTxnDuration)
	}
	if s.MaxTxnDuration < 0 {
		return bad("max_txn_duration", "must not be negative, got %s", s.MaxTxnDuration)
	}
	if s.MinTxnDuration > 0 && time.Duration(s.MinTxnDuration) > s.EffectiveMaxTxnDuration() {
		return bad("min_txn_duration", "%s exceeds max_txn_duration %s", s.MinTxnDuration, Duration(s.EffectiveMaxTxnDuration()))
	}
	for k := range s.Labels {
		if k == "" {
			return bad("labels", "a label name must not be empty")
		}
	}
	if s.SnapshotIntervalBytes < 0 {
		return bad("snapshot_interval_bytes", "must not be negative, got %d", s.SnapshotIntervalBytes)
	}
	if s.SnapshotsKept < 0 {
		return bad("snapshots_kept", "must not be negative, got %d", s.SnapshotsKept)
	}
	if s.LogResetTerm < 0 {
		return bad("log_reset_term", "must not be negative, got %d", s.LogResetTerm)
	}
	if err := s.validateOutputDrops(bad); err != nil {
		return err
	}
	if err := s.validateSourceResets(bad); err != nil {
		return err
	}
	if r := s.Restart; r != nil {
		switch {
		case r.MaxAttempts < 1:
			return bad("restart.max_attempts", "must be at least 1, got %d (leave restart out for manual restarts only)", r.MaxAttempts)
		case r.InitialBackoff < 0:
			return bad("restart.initial_backoff", "must not be negative, got %s", r.InitialBackoff)
		case r.MaxBackoff < 0:
			return bad("restart.max_backoff", "must not be negative, got %s", r.MaxBackoff)
		case r.MaxBackoff > 0 && time.Duration(r.MaxBackoff) < r.policy().InitialBackoff:
			return bad("restart.max_backoff", "%s is below initial_backoff %s", r.MaxBackoff, Duration(r.policy().InitialBackoff))
		}
	}
	return nil
}

// DesiredReplication is 1 + HotStandbys, or 0 when the shard is disabled.
// It makes *Spec an allocator.Item.
func (s *Spec) DesiredReplication() int {
	if s.Disable {
		return 0
	}
	return 1 + s.HotStandbys
}

// EffectiveMinTxnDuration is MinTxnDuration (zero by default).
func (s *Spec) EffectiveMinTxnDuration() time.Duration { return time.Duration(s.MinTxnDuration) }

// EffectiveMaxTxnDuration is MaxTxnDuration, or DefaultMaxTxnDuration when zero.
func (s *Spec) EffectiveMaxTxnDuration() time.Duration {
	if s.MaxTxnDuration == 0 {
		return DefaultMaxTxnDuration
	}
	return time.Duration(s.MaxTxnDuration)
}

// Partition is the partition index that every source of the spec reads (a
// shard made by `shards create` reads index i of each of its app's
// topics), or -1 when the sources name different partitions, as a spec
// written for `shards apply` may, or when there are none.
func (s *Spec) Partition() int {
	if len(s.Sources) == 0 {
		return -1
	}
	p := s.Sources[0].Partition
	for _, src := range s.Sources[1:] {
		if src.Partition != p {
			return -1
		}
	}
	return p
}

// specFields are the JSON field names of Spec, for ParseSpec's check.
var specFields = map[string]bool{
	"id": true, "app": true, "sources": true, "hot_standbys": true,
	"min_txn_duration": true, "max_txn_duration": true, "disable": true,
	"labels": true, "snapshot_interval_bytes": true, "snapshots_kept": true,
	"log_reset_term": true, "restart": true, "source_resets": true, "output_drops": true,
}

// UnmarshalJSON decodes a spec, naming the field of a bad duration. Unknown
// fields are ignored here (a spec written by a newer version still loads);
// ParseSpec rejects them.
func (s *Spec) UnmarshalJSON(b []byte) error {
	type plain Spec
	aux := struct {
		*plain
		Min json.RawMessage `json:"min_txn_duration"`
		Max json.RawMessage `json:"max_txn_duration"`
	}{plain: (*plain)(s)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	if len(s.Labels) == 0 {
		s.Labels = nil // "labels": {} and no labels are the same spec
	}
	return decodeDurations([]durationField{{"min_txn_duration", aux.Min, &s.MinTxnDuration}, {"max_txn_duration", aux.Max, &s.MaxTxnDuration}})
}

// ParseSpec decodes and validates one JSON spec as an operator wrote it.
// Unknown fields are errors, so a misspelt field is reported rather than
// ignored.
func ParseSpec(raw []byte) (*Spec, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("shard spec: %w", err)
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !specFields[k] {
			return nil, fmt.Errorf("shard spec: unknown field %q", k)
		}
	}
	if raw, ok := fields["restart"]; ok && string(raw) != "null" {
		var sub map[string]json.RawMessage
		if err := json.Unmarshal(raw, &sub); err != nil {
			return nil, fmt.Errorf("shard spec: restart: %w", err)
		}
		for k := range sub {
			if !restartFields[k] {
				return nil, fmt.Errorf("shard spec: unknown field %q in restart (max_attempts, initial_backoff, max_backoff)", k)
			}
		}
	}
	var s Spec
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("shard spec: %w", err)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// DecodeSpec decodes the value of <root>/items/<id>; it has the signature of
// allocator.Config.DecodeItem and returns a *Spec. The spec's id must be
// empty (it is filled in) or equal id.
func DecodeSpec(id string, raw []byte) (allocator.Item, error) {
	s, err := decodeSpec(id, raw)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func decodeSpec(id string, raw []byte) (*Spec, error) {
	var s Spec
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("shard spec %q: %w", id, err)
	}
	if s.ID == "" {
		s.ID = id
	}
	if s.ID != id {
		return nil, fmt.Errorf("shard spec %q: id: %q does not match its key", id, s.ID)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// sortSpecs orders specs by id.
func sortSpecs(specs []*Spec) {
	sort.Slice(specs, func(i, j int) bool { return specs[i].ID < specs[j].ID })
}

// Duration is a time.Duration that reads and writes JSON as a Go duration
// string ("250ms", "1s", "1m30s"). An empty string is zero.
type Duration time.Duration

// String formats like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string. A bare number is rejected, as
// its unit would be a guess.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration %s: want a Go duration string such as \"500ms\" or \"2s\"", string(b))
	}
	if s == "" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}
