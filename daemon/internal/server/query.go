package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/daemon/internal/query"
	"github.com/consumerd/consumerd/shard"
)

// query implements GET /v1/query (K is key=K, raw bytes percent-encoded,
// or key_b64=B, base64: see query.decodeBase64Param):
//
//	?app=A&shard=S&key=K   K's value on shard S (forwarded once to S's primary)
//	?app=A&shard=S&all=1   every key/value on shard S (forwarded likewise)
//	?app=A&key=K           K's value merged over the shards query.RouteFor picks
//	?app=A&all=1           every key/value of app A, merged over all its shards
//
// The last two are never silently partial: a shard that does not answer, or
// a shard spec in etcd that does not decode, is an error (503) naming it;
// with partial=1 an invalid spec is reported in the answer's "partial"
// field instead.
func (s *server) serveQuery(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	appName, shardID := q.Get("app"), q.Get("shard")
	all := q.Get("all") == "1" || q.Get("all") == "true"
	partial := q.Get("partial") == "1" || q.Get("partial") == "true"
	app, ok := s.apps[appName]
	if !ok {
		httpError(w, http.StatusNotFound, "unknown app %q", appName)
		return
	}
	key, hasKey, err := query.KeyParam(q)
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
	resp := api.QueryResponse{App: appName, Shards: map[string][]api.QueryEntry{}}
	if hasKey {
		resp.Key, resp.KeyB64 = api.EncodeBytes(key)
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
		resp.Shards[shardID] = api.EncodeEntries(vals)
	default:
		snap := sess.member.KeySpace().Snapshot()
		ans, err := query.Ask(r.Context(), s.http, s.topics.Get, snap, query.Request{App: app, Key: key, All: all, Partial: partial})
		switch {
		case errors.Is(err, query.ErrIncomplete):
			httpError(w, http.StatusServiceUnavailable, "%v, or pass partial=1 to accept a partial answer", err)
			return
		case errors.Is(err, query.ErrCannotMerge):
			httpError(w, http.StatusInternalServerError, "%v", err)
			return
		case err != nil:
			httpError(w, http.StatusServiceUnavailable, "%v", err)
			return
		}
		if ans.Partial != nil {
			resp.Partial = ans.Partial.Error()
		}
		for id, vals := range ans.PerShard {
			resp.Shards[id] = api.EncodeEntries(vals)
		}
		if all {
			resp.Entries = api.EncodeEntries(ans.Merged)
			break
		}
		v, found := ans.Merged[key]
		resp.Found = &found
		if found {
			resp.Value, resp.ValueB64 = api.EncodeBytes(v)
		}
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
	if r.Header.Get(query.ForwardedHeader) != "" {
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
	req.Header.Set(query.ForwardedHeader, s.cfg.Zone+"/"+s.cfg.MemberID)
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
