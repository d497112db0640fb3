package allocator

// This file holds load reports: each member writes, under its lease, what
// its primaries cost (<root>/loads/<zone>/<member>), and the leader reads
// them to place primaries by load (scheduler_load.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/consumerd/consumerd/internal/ident"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const loadsDir = "/loads/"

// LoadsPrefix is the key prefix of every load report.
func LoadsPrefix(prefix string) string { return cleanPrefix(prefix) + loadsDir }

// LoadKey is <root>/loads/<zone>/<member>.
func LoadKey(prefix, zone, id string) string { return LoadsPrefix(prefix) + zone + "/" + id }

// parseLoadKey parses <root>/loads/<zone>/<member> into "zone/member".
func parseLoadKey(prefix, key string) (string, error) {
	zone, id, err := parseZoneMember("load", LoadsPrefix(prefix), key)
	return zone + "/" + id, err
}

// LoadReport is the value of <root>/loads/<zone>/<member>: what the member's
// primaries cost over the last window. A member writes it under its lease
// (Member.ReportLoad), so it vanishes with the member.
type LoadReport struct {
	// WindowMillis is the length of the window the rates were measured over.
	WindowMillis int64 `json:"window_ms"`
	// Primaries holds, by item id, each item this member was primary of
	// for the whole window (a primary that started within the window is
	// left out until its first whole window: a part-window rate misleads).
	Primaries map[string]PrimaryLoad `json:"primaries,omitempty"`
}

// PrimaryLoad is what one primary cost over a report's window.
type PrimaryLoad struct {
	// Term is the CreateRevision of the slot-0 key the primary held: the
	// leader uses a figure only while that key is still the item's primary.
	Term int64 `json:"term"`
	// BusyMicros is the time its transaction loop spent working (consuming
	// messages and building commits, not waiting), in microseconds per
	// second: 1,000,000 is one core kept busy. It is the load the leader
	// balances.
	BusyMicros int64 `json:"busy_us_per_s"`
	// Messages and Bytes are the input it consumed, per second.
	Messages int64 `json:"msgs_per_s"`
	Bytes    int64 `json:"bytes_per_s"`
	// AgeMillis is how long it had led here when measured. The leader
	// does not move a primary younger than LoadMinDwellWindows windows.
	AgeMillis int64 `json:"age_ms"`
}

// LoadMinDwellWindows is how many report windows a primary leads on a
// member before the leader may move it for load again: a hand-over
// pauses the shard, and a figure measured in the first windows after one
// is the noisiest (caches cold, the old primary's backlog).
const LoadMinDwellWindows = 5

// young reports whether p, in report r, led for fewer than
// LoadMinDwellWindows of r's windows.
func (r LoadReport) young(p PrimaryLoad) bool {
	return p.AgeMillis < LoadMinDwellWindows*r.WindowMillis
}

// DecodeLoadReport decodes and checks a load report value.
func DecodeLoadReport(raw []byte) (LoadReport, error) {
	var r LoadReport
	if err := json.Unmarshal(raw, &r); err != nil {
		return LoadReport{}, fmt.Errorf("load report: %w", err)
	}
	if r.WindowMillis <= 0 {
		return LoadReport{}, fmt.Errorf("load report: window_ms %d is not positive", r.WindowMillis)
	}
	for id, p := range r.Primaries {
		if err := ident.Check(id); err != nil {
			return LoadReport{}, fmt.Errorf("load report: item %q: %w", id, err)
		}
		if p.Term <= 0 || p.BusyMicros < 0 || p.Messages < 0 || p.Bytes < 0 || p.AgeMillis < 0 {
			return LoadReport{}, fmt.Errorf("load report: item %s: term %d must be positive and rates not negative", id, p.Term)
		}
	}
	return r, nil
}

// ReportLoad writes r as this member's load report, under its lease.
func (m *Member) ReportLoad(ctx context.Context, r LoadReport) error {
	val, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("allocator: encoding load report: %w", err)
	}
	key := LoadKey(m.prefix, m.cfg.Zone, m.cfg.MemberID)
	if _, err := m.cfg.Client.Put(ctx, key, string(val), clientv3.WithLease(m.lease)); err != nil {
		etcdErrors.Inc()
		return fmt.Errorf("allocator: writing load report %s: %w", key, err)
	}
	return nil
}

// LoadChanged reports whether a report of cur is worth writing over prev:
// the set of primaries or their terms changed, a primary led long enough
// to be moved (LoadMinDwellWindows), or a primary's busy time
// moved by more than a quarter and by more than 1% of a core. Small changes
// are not written: every member watches the whole keyspace, so each write
// costs one event per member.
func LoadChanged(prev, cur LoadReport) bool {
	if len(prev.Primaries) != len(cur.Primaries) {
		return true
	}
	for id, c := range cur.Primaries {
		p, ok := prev.Primaries[id]
		if !ok || p.Term != c.Term || prev.young(p) != cur.young(c) {
			return true
		}
		d := math.Abs(float64(c.BusyMicros - p.BusyMicros))
		if d > loadReportMinChange && d > 0.25*float64(p.BusyMicros) {
			return true
		}
	}
	return false
}

// loadReportMinChange is the busy time (µs per second) a primary's load
// must move by before a new report is written: 1% of a core.
const loadReportMinChange = 10_000
