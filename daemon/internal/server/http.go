package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/daemon/internal/buildinfo"
	"github.com/consumerd/consumerd/daemon/internal/statuspage"
	"github.com/consumerd/consumerd/shard"
)

// handler routes the member's HTTP endpoints (DESIGN §7).
func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(prefixGatherer{prometheus.DefaultGatherer, "etcd_", false}, promhttp.HandlerOpts{}))
	mux.Handle("GET /metrics/etcd", promhttp.HandlerFor(prefixGatherer{prometheus.DefaultGatherer, "etcd_", true}, promhttp.HandlerOpts{}))
	mux.Handle("GET /livez", instrument("livez", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})))
	mux.Handle("GET /readyz", instrument("readyz", http.HandlerFunc(s.readyz)))
	mux.Handle("GET /v1/status", instrument("status", http.HandlerFunc(s.status)))
	mux.Handle("GET /v1/query", instrument("query", http.HandlerFunc(s.serveQuery)))
	// The status pages: / exactly, and one per shard.
	pages := &statuspage.Pages{Self: s.statusNow, View: s.view, HTTP: s.http, Etcd: s.client, Prefix: s.cfg.EtcdPrefix, Log: s.log}
	mux.Handle("GET /{$}", instrument("status_page", http.HandlerFunc(pages.ServeCluster)))
	mux.Handle("GET /shards/{id}", instrument("shard_page", http.HandlerFunc(pages.ServeShard)))
	return mux
}

// prefixGatherer keeps the metric families whose name has prefix (keep) or
// lacks it (!keep). /metrics leaves out etcd's own server metrics, which
// etcd registers in the default registry whenever its server package is
// linked in (for the embedded etcd) and which do not follow Prometheus
// naming conventions; they are served at /metrics/etcd instead.
type prefixGatherer struct {
	g      prometheus.Gatherer
	prefix string
	keep   bool
}

func (p prefixGatherer) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := p.g.Gather()
	out := mfs[:0]
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), p.prefix) == p.keep {
			out = append(out, mf)
		}
	}
	return out, err
}

// readiness implements /readyz: a member is ready when
//   - its etcd session (lease) is live, and
//   - no local replica is FAILED, and
//   - every local replica assigned slot 0 (primary) is PRIMARY.
//
// Standbys still in BACKFILL do not make it unready (they serve nothing);
// a primary still replaying its log (BACKFILL or IDLE before PRIMARY) does,
// since its shard's queries and consumption wait on it.
func readiness(session bool, replicas []api.StatusReplica) (bool, []string) {
	var why []string
	if !session {
		why = append(why, "no live etcd session")
	}
	for _, r := range replicas {
		switch {
		case r.State == string(allocator.StateFailed):
			why = append(why, fmt.Sprintf("shard %s slot %d FAILED: %s", r.Shard, r.Slot, r.Error))
		case r.Slot == 0 && r.State != string(allocator.StatePrimary):
			why = append(why, fmt.Sprintf("shard %s primary is %s", r.Shard, r.State))
		}
	}
	return len(why) == 0, why
}

func (s *server) readyz(w http.ResponseWriter, _ *http.Request) {
	st := s.statusNow()
	ok, why := readiness(st.Session, st.Replicas)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "not ready:\n  "+strings.Join(why, "\n  ")+"\n")
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

func (s *server) statusNow() api.StatusResponse {
	st := api.StatusResponse{Member: s.cfg.MemberID, Zone: s.cfg.Zone, Endpoint: s.endpoint, Exiting: s.exiting.Load(), Replicas: []api.StatusReplica{},
		Version: buildinfo.Current.Version, Build: buildinfo.Current.String(), UptimeSeconds: s.health.uptime(time.Now()).Round(time.Millisecond).Seconds()}
	sess := s.sess.Load()
	if sess != nil {
		select {
		case <-sess.member.Done():
		default:
			st.Session = true
		}
		st.Leader = sess.member.KeySpace().Snapshot().Leader == s.cfg.Zone+"/"+s.cfg.MemberID
		for _, r := range sess.svc.Status() {
			st.Replicas = append(st.Replicas, statusReplica(r, s.snapshots != nil))
		}
	}
	st.Ready, _ = readiness(st.Session, st.Replicas)
	st.Etcd, st.NATS = s.etcdHealth(st.Session), s.natsHealth()
	return st
}

// statusReplica is r in /v1/status; snapshots says the member takes them
// (LogBytesSinceSnapshot is reported only then).
func statusReplica(r shard.ReplicaInfo, snapshots bool) api.StatusReplica {
	sr := api.StatusReplica{Shard: r.Shard, App: r.App, Slot: r.Slot, State: string(r.State), Error: r.Error, Lag: r.Lag, Applied: uint64(r.Applied), ReplayTo: uint64(r.ReplayTo)}
	if len(r.Offsets) > 0 {
		sr.Offsets = make(map[string]uint64, len(r.Offsets))
		for ch, id := range r.Offsets {
			sr.Offsets[ch] = uint64(id)
		}
	}
	if !r.LastCommitAt.IsZero() {
		t := r.LastCommitAt.UTC()
		sr.LastCommit = &t
	}
	if ls := r.LastSnapshot; ls != nil {
		sr.LastSnapshot = &api.StatusSnapshot{ID: ls.ID, Manifest: ls.Manifest, Time: ls.Created.UTC(), Bytes: ls.Bytes, LogID: uint64(ls.LogID)}
	}
	if snapshots && r.State == allocator.StatePrimary {
		n := r.LogBytesSinceSnapshot
		sr.LogBytesSinceSnapshot = &n
	}
	return sr
}

func (s *server) status(w http.ResponseWriter, _ *http.Request) {
	writeJSONResponse(w, http.StatusOK, s.statusNow())
}

func writeJSONResponse(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func httpError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSONResponse(w, code, api.ErrorResponse{Error: fmt.Sprintf(format, args...)})
}

// view is the member's mirror of the keyspace; ok is false while it has no
// session.
func (s *server) view() (allocator.Snapshot, bool) {
	sess := s.sess.Load()
	if sess == nil {
		return allocator.Snapshot{}, false
	}
	return sess.member.KeySpace().Snapshot(), true
}
