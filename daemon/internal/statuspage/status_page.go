package statuspage

// The status pages (GET / and GET /shards/<id>): server-rendered HTML from
// html/template (which escapes every value), no script, nothing fetched
// from elsewhere, refreshed by the browser every 5 s. What they show comes
// from this member's view of etcd (its KeySpace mirror), its own replicas,
// and the other members' /v1/status, fetched with a short timeout: etcd
// holds only each replica's state, error and a stale applied id, while
// lag, the last commit and snapshot figures live in the members. A member
// that does not answer is named in the page, and its replicas show what
// etcd holds. status_view.go builds the pages; templates/ renders them.

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/internal/ident"
	"github.com/consumerd/consumerd/recoverylog/snapshot"
	"github.com/hashicorp/go-hclog"
)

//go:embed templates/*.html
var templateFS embed.FS

// pageTemplates are the pages' templates, parsed once: "status" (/),
// "shard" (/shards/<id>) and "error".
var pageTemplates = template.Must(template.New("pages").ParseFS(templateFS, "templates/*.html"))

// errorPage is the "error" template's data.
type errorPage struct {
	Code           int
	Title, Message string
}

// Pages serves the status pages of one member.
type Pages struct {
	// Self is this member's GET /v1/status, answered without HTTP.
	Self func() api.StatusResponse
	// View is the member's mirror of the keyspace; ok is false while the
	// member has no session (it is joining the cluster).
	View func() (snap allocator.Snapshot, ok bool)
	// HTTP calls the other members (their /v1/status).
	HTTP *http.Client
	// Etcd and Prefix read a shard's snapshot pointer.
	Etcd   *clientv3.Client
	Prefix string
	Log    hclog.Logger
}

// ServeCluster serves GET /: the leader, every member and every shard.
func (s *Pages) ServeCluster(w http.ResponseWriter, r *http.Request) {
	self := s.Self()
	snap, sess := s.View()
	keys := make(map[string]bool, len(snap.Members))
	for _, m := range snap.Members {
		keys[m.Key()] = true
	}
	p := buildClusterPage(self, snap, memberStatuses(r.Context(), s.HTTP, snap, self, keys), time.Now())
	if !sess {
		p.Notes = append([]string{"this member has no session (it is joining the cluster, or rejoining after losing its lease): it has no view of etcd to show yet"}, p.Notes...)
	}
	s.renderPage(w, http.StatusOK, "status", p)
}

// ServeShard serves GET /shards/<id>: one shard's spec, replicas, progress
// and last snapshot. An id that is not a valid shard id is 400, one etcd
// does not hold is 404, both naming it.
func (s *Pages) ServeShard(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := ident.Check(id); err != nil {
		s.renderPage(w, http.StatusBadRequest, "error", errorPage{http.StatusBadRequest, "Bad shard id", fmt.Sprintf("shard id %v", err)})
		return
	}
	snap, sess := s.View()
	if !sess {
		self := s.Self()
		s.renderPage(w, http.StatusServiceUnavailable, "error", errorPage{http.StatusServiceUnavailable, "No session",
			fmt.Sprintf("member %s/%s has no session (it is joining the cluster): it cannot show shard %s yet", self.Zone, self.Member, id)})
		return
	}
	_, valid := snap.Items[id]
	_, invalid := snap.InvalidItems[id]
	if !valid && !invalid {
		s.renderPage(w, http.StatusNotFound, "error", errorPage{http.StatusNotFound, "Unknown shard",
			fmt.Sprintf("there is no shard %s in etcd (%d shards; see the list)", id, len(snap.Items)+len(snap.InvalidItems))})
		return
	}
	self := s.Self()
	keys := map[string]bool{}
	for _, a := range snap.Assignments {
		if a.Item == id {
			keys[a.Zone+"/"+a.Member] = true
		}
	}
	type pointer struct {
		p   snapshot.Pointer
		ok  bool
		err error
	}
	ptrCh := make(chan pointer, 1)
	go func() { // owned here: one etcd read within peerStatusTimeout
		ctx, cancel := context.WithTimeout(r.Context(), peerStatusTimeout)
		defer cancel()
		p, ok, err := snapshot.LoadPointer(ctx, s.Etcd, s.Prefix, id)
		ptrCh <- pointer{p, ok, err}
	}()
	statuses := memberStatuses(r.Context(), s.HTTP, snap, self, keys)
	ptr := <-ptrCh
	if ptr.err != nil && errors.Is(ptr.err, context.DeadlineExceeded) {
		ptr.err = fmt.Errorf("reading the snapshot pointer from etcd: no answer within %s", peerStatusTimeout)
	}
	s.renderPage(w, http.StatusOK, "shard", buildShardPage(self, snap, id, statuses, ptr.p, ptr.ok, ptr.err, time.Now()))
}

// renderPage executes template name with data and writes it with code. The
// policy header forbids scripts and every fetch (the pages have neither):
// were a value ever to escape html/template's escaping, it could not run.
func (s *Pages) renderPage(w http.ResponseWriter, code int, name string, data any) {
	var b bytes.Buffer
	if err := pageTemplates.ExecuteTemplate(&b, name, data); err != nil {
		s.Log.Error("rendering a status page", "template", name, "error", err)
		http.Error(w, fmt.Sprintf("rendering the %s page: %v", name, err), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}
