package daemon

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

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

// QueryResponse is the body of GET /v1/query, exported as that endpoint's
// JSON contract for Go clients that decode it. Keys and values are bytes
// (any, UTF-8 or not): each travels as "key" / "value" when its bytes are
// valid UTF-8 and as "key_b64" / "value_b64" (standard base64) otherwise,
// exactly one of each pair (see jsonBytes).
type QueryResponse struct {
	App string `json:"app"`
	// Key or KeyB64 is the key asked for, on key queries.
	Key    *string `json:"key,omitempty"`
	KeyB64 *string `json:"key_b64,omitempty"`
	// Shards holds each asked shard's entries, sorted by key bytes. A key
	// query of a shard that lacks the key has an empty list.
	Shards map[string][]QueryEntry `json:"shards"`
	// Found, and Value or ValueB64 when found, answer a key query over the
	// app (no shard parameter): whether any asked shard had the key, and
	// its values merged with the app's Merge.
	Found    *bool   `json:"found,omitempty"`
	Value    *string `json:"value,omitempty"`
	ValueB64 *string `json:"value_b64,omitempty"`
	// Entries is, for all=1 over the app (no shard parameter), every key
	// and its value merged over the shards, sorted by key bytes.
	Entries []QueryEntry `json:"entries,omitempty"`
	// Partial, set only when the request said partial=1, says which shards
	// the answer is missing and why.
	Partial string `json:"partial,omitempty"`
}

// QueryEntry is one key and its value in QueryResponse.Shards.
type QueryEntry struct {
	Key      *string `json:"key,omitempty"`
	KeyB64   *string `json:"key_b64,omitempty"`
	Value    *string `json:"value,omitempty"`
	ValueB64 *string `json:"value_b64,omitempty"`
}

// queryEntries renders one shard's values as entries sorted by key bytes.
func queryEntries(vals map[string]string) []QueryEntry {
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]QueryEntry, len(keys))
	for i, k := range keys {
		var e QueryEntry
		e.Key, e.KeyB64 = jsonBytes(k)
		e.Value, e.ValueB64 = jsonBytes(vals[k])
		out[i] = e
	}
	return out
}

// entryValues is the inverse of queryEntries.
func entryValues(es []QueryEntry) (map[string]string, error) {
	vals := make(map[string]string, len(es))
	for i, e := range es {
		k, err := fromJSONBytes("key", e.Key, e.KeyB64)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		v, err := fromJSONBytes("value", e.Value, e.ValueB64)
		if err != nil {
			return nil, fmt.Errorf("entry %d (key %s): %w", i, describeKey(k), err)
		}
		if _, dup := vals[k]; dup {
			return nil, fmt.Errorf("entry %d: key %s appears twice", i, describeKey(k))
		}
		vals[k] = v
	}
	return vals, nil
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
	// The status pages (status_page.go): / exactly, and one per shard.
	mux.Handle("GET /{$}", instrument("status_page", http.HandlerFunc(s.statusPage)))
	mux.Handle("GET /shards/{id}", instrument("shard_page", http.HandlerFunc(s.shardPage)))
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
	st := StatusResponse{Member: s.cfg.MemberID, Zone: s.cfg.Zone, Endpoint: s.endpoint, Exiting: s.exiting.Load(), Replicas: []StatusReplica{},
		Version: statusVersion(), Build: statusBuild(), UptimeSeconds: s.health.uptime(time.Now()).Round(time.Millisecond).Seconds()}
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
func statusReplica(r shard.ReplicaInfo, snapshots bool) StatusReplica {
	sr := StatusReplica{Shard: r.Shard, App: r.App, Slot: r.Slot, State: string(r.State), Error: r.Error, Lag: r.Lag, Applied: uint64(r.Applied), ReplayTo: uint64(r.ReplayTo)}
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
		sr.LastSnapshot = &StatusSnapshot{ID: ls.ID, Manifest: ls.Manifest, Time: ls.Created.UTC(), Bytes: ls.Bytes, LogID: uint64(ls.LogID)}
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
	writeJSONResponse(w, code, errorBody{Error: fmt.Sprintf(format, args...)})
}

// query implements GET /v1/query (K is key=K, raw bytes percent-encoded,
// or key_b64=B, base64: see decodeBase64Param):
//
//	?app=A&shard=S&key=K   K's value on shard S (forwarded once to S's primary)
//	?app=A&shard=S&all=1   every key/value on shard S (forwarded likewise)
//	?app=A&key=K           K's value merged over the shards routeQuery picks
//	?app=A&all=1           every key/value of app A, merged over all its shards
//
// The last two are never silently partial: a shard that does not answer, or
// a shard spec in etcd that does not decode, is an error (503) naming it;
// with partial=1 an invalid spec is reported in the answer's "partial"
// field instead.
func (s *server) query(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	appName, shardID := q.Get("app"), q.Get("shard")
	all := q.Get("all") == "1" || q.Get("all") == "true"
	partial := q.Get("partial") == "1" || q.Get("partial") == "true"
	app, ok := s.apps[appName]
	if !ok {
		httpError(w, http.StatusNotFound, "unknown app %q", appName)
		return
	}
	key, hasKey, err := keyParam(q)
	if err != nil {
		httpError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if all == hasKey {
		httpError(w, http.StatusBadRequest, "give exactly one of key=K, key_b64=B or all=1")
		return
	}
	sess := s.sess.Load()
	if sess == nil {
		httpError(w, http.StatusServiceUnavailable, "member has no live session")
		return
	}
	resp := QueryResponse{App: appName, Shards: map[string][]QueryEntry{}}
	if hasKey {
		resp.Key, resp.KeyB64 = jsonBytes(key)
	}
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
		resp.Shards[shardID] = queryEntries(vals)
	default:
		snap := sess.member.KeySpace().Snapshot()
		route, err := routeQuery(r.Context(), s.client, s.cfg.EtcdPrefix, snap, app, key, all)
		if err != nil {
			httpError(w, http.StatusServiceUnavailable, "%v", err)
			return
		}
		if err := route.incomplete(); err != nil {
			if !partial {
				httpError(w, http.StatusServiceUnavailable, "%v, or pass partial=1 to accept a partial answer", err)
				return
			}
			resp.Partial = err.Error()
		}
		per, err := gather(r.Context(), s.http, snap, app, route.Shards, key, all)
		if err != nil {
			httpError(w, http.StatusServiceUnavailable, "%v", err)
			return
		}
		merged, err := mergeShards(app, route.Shards, per)
		if err != nil {
			httpError(w, http.StatusInternalServerError, "%v", err)
			return
		}
		for id, vals := range per {
			resp.Shards[id] = queryEntries(vals)
		}
		if all {
			resp.Entries = queryEntries(merged)
			break
		}
		v, found := merged[key]
		resp.Found = &found
		if found {
			resp.Value, resp.ValueB64 = jsonBytes(v)
		}
	}
	writeJSONResponse(w, http.StatusOK, resp)
}

// keyParam is a query's key: key=K (any bytes, percent-encoded) or
// key_b64=B. hasKey is false when neither is given.
func keyParam(q url.Values) (key string, hasKey bool, err error) {
	switch {
	case q.Has("key") && q.Has("key_b64"):
		return "", false, errBothKeys
	case q.Has("key_b64"):
		k, err := decodeBase64Param(q.Get("key_b64"))
		if err != nil {
			return "", false, fmt.Errorf("key_b64=%s: not base64: %w", q.Get("key_b64"), err)
		}
		return k, true, nil
	case q.Has("key"):
		return q.Get("key"), true, nil
	}
	return "", false, nil
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

// gather asks each shard of ids (of app) for key (or, when all, every key)
// from the shard's primary, and returns each shard's values. It fails when
// a shard has no primary or does not answer, so a result is never silently
// partial.
func gather(ctx context.Context, hc *http.Client, snap allocator.Snapshot, app shard.App, ids []string, key string, all bool) (map[string]map[string]string, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("app %s: no shard to ask", app.Name)
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
	return per, nil
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
				return nil, fmt.Errorf("key %s is on shards %s and %s, and app %s has no Merge", describeKey(k), from[k], id, app.Name)
			}
			m, err := app.Merge(prev, v)
			if err != nil {
				return nil, fmt.Errorf("merging key %s of shard %s: %w", describeKey(k), id, err)
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
		v.Set("key_b64", base64.RawURLEncoding.EncodeToString([]byte(key)))
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
	es, ok := qr.Shards[id]
	if !ok {
		return nil, fmt.Errorf("shard %s: primary at %s did not answer for it", id, ep)
	}
	vals, err := entryValues(es)
	if err != nil {
		return nil, fmt.Errorf("shard %s: answer of %s: %w", id, ep, err)
	}
	return vals, nil
}
