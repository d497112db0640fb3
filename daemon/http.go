package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/shard"
)

// maxParallelQueries bounds the shard queries a gather has in flight.
const maxParallelQueries = 16

// forwardedHeader marks a /v1/query request that a member forwarded to the
// shard's primary; the receiver never forwards it again (one hop, no loops).
const forwardedHeader = "Consumerd-Forwarded"

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
}

// QueryResponse is the body of GET /v1/query, exported as that endpoint's
// JSON contract for Go clients that decode it.
type QueryResponse struct {
	App string `json:"app"`
	Key string `json:"key,omitempty"`
	// Shards holds each answering shard's values: key -> value.
	Shards map[string]map[string]string `json:"shards"`
	// Value is, for a key query over all shards (no shard parameter), the
	// key's values merged with the app's Merge; Found says whether any shard
	// had the key.
	Value *string `json:"value,omitempty"`
	Found *bool   `json:"found,omitempty"`
}

type errorBody struct {
	Error string `json:"error"`
}

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
	mux.Handle("GET /v1/query", instrument("query", http.HandlerFunc(s.query)))
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
func readiness(session bool, replicas []StatusReplica) (bool, []string) {
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

func (s *server) statusNow() StatusResponse {
	st := StatusResponse{Member: s.cfg.MemberID, Zone: s.cfg.Zone, Endpoint: s.endpoint, Exiting: s.exiting.Load(), Replicas: []StatusReplica{}}
	sess := s.sess.Load()
	if sess != nil {
		select {
		case <-sess.member.Done():
		default:
			st.Session = true
		}
		st.Leader = sess.member.KeySpace().Snapshot().Leader == s.cfg.Zone+"/"+s.cfg.MemberID
		for _, r := range sess.svc.Status() {
			st.Replicas = append(st.Replicas, statusReplica(r))
		}
	}
	st.Ready, _ = readiness(st.Session, st.Replicas)
	return st
}

func statusReplica(r shard.ReplicaInfo) StatusReplica {
	sr := StatusReplica{Shard: r.Shard, App: r.App, Slot: r.Slot, State: string(r.State), Error: r.Error, Lag: r.Lag, Applied: uint64(r.Applied)}
	if len(r.Offsets) > 0 {
		sr.Offsets = make(map[string]uint64, len(r.Offsets))
		for ch, id := range r.Offsets {
			sr.Offsets[ch] = uint64(id)
		}
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
	writeJSONResponse(w, code, errorBody{Error: fmt.Sprintf(format, args...)})
}

// query implements GET /v1/query:
//
//	?app=A&shard=S&key=K   K's value on shard S (forwarded once to S's primary)
//	?app=A&shard=S&all=1   every key/value on shard S (forwarded likewise)
//	?app=A&key=K           K's value merged over every shard of A (fan-out)
//	?app=A&all=1           every key/value of this member's primaries of A
func (s *server) query(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	appName, shardID, key := q.Get("app"), q.Get("shard"), q.Get("key")
	all := q.Get("all") == "1" || q.Get("all") == "true"
	app, ok := s.apps[appName]
	if !ok {
		httpError(w, http.StatusNotFound, "unknown app %q", appName)
		return
	}
	if all == q.Has("key") {
		httpError(w, http.StatusBadRequest, "give exactly one of key=K or all=1")
		return
	}
	sess := s.sess.Load()
	if sess == nil {
		httpError(w, http.StatusServiceUnavailable, "member has no live session")
		return
	}
	resp := QueryResponse{App: appName, Key: key, Shards: map[string]map[string]string{}}
	switch {
	case shardID != "":
		vals, local, err := s.queryLocal(sess, app, shardID, key, all)
		if err != nil {
			httpError(w, http.StatusInternalServerError, "shard %s: %v", shardID, err)
			return
		}
		if !local {
			s.forward(w, r, sess, shardID)
			return
		}
		resp.Shards[shardID] = vals
	case all:
		for _, ri := range sess.svc.Status() {
			if ri.App != appName || ri.Slot != 0 || ri.State != allocator.StatePrimary {
				continue
			}
			vals, local, err := s.queryLocal(sess, app, ri.Shard, "", true)
			if err != nil {
				httpError(w, http.StatusInternalServerError, "shard %s: %v", ri.Shard, err)
				return
			}
			if local {
				resp.Shards[ri.Shard] = vals
			}
		}
	default:
		snap := sess.member.KeySpace().Snapshot()
		merged, err := gather(r.Context(), s.http, snap, app, key, false)
		if err != nil {
			httpError(w, http.StatusServiceUnavailable, "%v", err)
			return
		}
		v, found := merged[key]
		resp.Value, resp.Found = &v, &found
	}
	writeJSONResponse(w, http.StatusOK, resp)
}

// queryLocal answers from a local primary; local is false when shardID is not
// a primary on this member.
func (s *server) queryLocal(sess *session, app shard.App, shardID, key string, all bool) (map[string]string, bool, error) {
	sh, release, ok := sess.svc.Primary(shardID)
	if !ok {
		return nil, false, nil
	}
	defer release()
	vals := map[string]string{}
	if sh.Spec() != nil && sh.Spec().App != app.Name {
		return nil, true, fmt.Errorf("shard runs app %q, not %q", sh.Spec().App, app.Name)
	}
	if all {
		if app.Scan == nil {
			return nil, true, fmt.Errorf("app %s does not support listing all keys", app.Name)
		}
		err := app.Scan(sh, func(k, v string) error { vals[k] = v; return nil })
		return vals, true, err
	}
	if app.Query == nil {
		return nil, true, fmt.Errorf("app %s does not support key queries", app.Name)
	}
	v, found, err := app.Query(sh, key)
	if err != nil {
		return nil, true, err
	}
	if found {
		vals[key] = v
	}
	return vals, true, nil
}

// forward proxies a shard query to the shard's primary, one hop only.
func (s *server) forward(w http.ResponseWriter, r *http.Request, sess *session, shardID string) {
	if r.Header.Get(forwardedHeader) != "" {
		httpError(w, http.StatusMisdirectedRequest, "shard %s: not primary on member %s/%s (request was already forwarded once)", shardID, s.cfg.Zone, s.cfg.MemberID)
		return
	}
	snap := sess.member.KeySpace().Snapshot()
	p, ep, ok := shard.PrimaryOf(snap, shardID)
	if !ok {
		httpError(w, http.StatusServiceUnavailable, "shard %s has no primary", shardID)
		return
	}
	if ep == "" || ep == s.endpoint {
		httpError(w, http.StatusServiceUnavailable, "shard %s: primary %s/%s is not serving it yet (%s)", shardID, p.Zone, p.Member, p.Status.State)
		return
	}
	u := ep + "/v1/query?" + r.URL.RawQuery
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u, nil)
	if err != nil {
		httpError(w, http.StatusInternalServerError, "forwarding: %v", err)
		return
	}
	req.Header.Set(forwardedHeader, s.cfg.Zone+"/"+s.cfg.MemberID)
	resp, err := s.http.Do(req)
	if err != nil {
		httpError(w, http.StatusBadGateway, "forwarding to primary %s/%s at %s: %v", p.Zone, p.Member, ep, err)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// gather asks every shard of app for key (or, when all, every key) from the
// shard's primary, and merges values of equal keys with app.Merge. It fails
// when a shard has no primary or does not answer, so a result is never
// silently partial.
func gather(ctx context.Context, hc *http.Client, snap allocator.Snapshot, app shard.App, key string, all bool) (map[string]string, error) {
	var ids []string // sorted: shard.Specs is
	for _, sp := range shard.Specs(snap) {
		if sp.App == app.Name && !sp.Disable {
			ids = append(ids, sp.ID)
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("app %s has no shards", app.Name)
	}
	type answer struct {
		id   string
		vals map[string]string
		err  error
	}
	answers := make(chan answer, len(ids))
	sem := make(chan struct{}, maxParallelQueries)
	for _, id := range ids {
		go func() { // owned here: sends exactly one answer, bounded by ctx
			sem <- struct{}{}
			defer func() { <-sem }()
			vals, err := queryShard(ctx, hc, snap, app.Name, id, key, all)
			answers <- answer{id, vals, err}
		}()
	}
	per := map[string]map[string]string{}
	var errs []error
	for range ids {
		a := <-answers
		if a.err != nil {
			errs = append(errs, a.err)
			continue
		}
		per[a.id] = a.vals
	}
	if len(errs) > 0 {
		sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return nil, errors.New(strings.Join(msgs, "; "))
	}
	return mergeShards(app, ids, per)
}

// mergeShards merges per-shard values in shard id order (pure).
func mergeShards(app shard.App, ids []string, per map[string]map[string]string) (map[string]string, error) {
	out := map[string]string{}
	from := map[string]string{}
	for _, id := range ids {
		for k, v := range per[id] {
			prev, seen := out[k]
			if !seen {
				out[k], from[k] = v, id
				continue
			}
			if app.Merge == nil {
				return nil, fmt.Errorf("key %q is on shards %s and %s, and app %s has no Merge", k, from[k], id, app.Name)
			}
			m, err := app.Merge(prev, v)
			if err != nil {
				return nil, fmt.Errorf("merging key %q of shard %s: %w", k, id, err)
			}
			out[k] = m
		}
	}
	return out, nil
}

// queryShard asks shard id's primary (per snap) for its values.
func queryShard(ctx context.Context, hc *http.Client, snap allocator.Snapshot, app, id, key string, all bool) (map[string]string, error) {
	p, ep, ok := shard.PrimaryOf(snap, id)
	if !ok {
		return nil, fmt.Errorf("shard %s has no primary", id)
	}
	if p.Status.State != allocator.StatePrimary {
		return nil, fmt.Errorf("shard %s: primary %s/%s is %s, not PRIMARY yet", id, p.Zone, p.Member, p.Status.State)
	}
	if ep == "" {
		return nil, fmt.Errorf("shard %s: primary %s/%s has no endpoint", id, p.Zone, p.Member)
	}
	v := url.Values{"app": {app}, "shard": {id}}
	if all {
		v.Set("all", "1")
	} else {
		v.Set("key", key)
	}
	u := ep + "/v1/query?" + v.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("shard %s: querying primary %s/%s: %w", id, p.Zone, p.Member, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var eb errorBody
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
			eb.Error = strings.TrimSpace(string(b))
		}
		return nil, fmt.Errorf("shard %s: primary %s/%s at %s: %s: %s", id, p.Zone, p.Member, ep, resp.Status, eb.Error)
	}
	var qr QueryResponse
	if err := json.NewDecoder(resp.Body).Decode(&qr); err != nil {
		return nil, fmt.Errorf("shard %s: decoding answer of %s: %w", id, ep, err)
	}
	vals, ok := qr.Shards[id]
	if !ok {
		return nil, fmt.Errorf("shard %s: primary at %s did not answer for it", id, ep)
	}
	return vals, nil
}
