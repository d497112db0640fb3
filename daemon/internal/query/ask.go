package query

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/shard"
)

// Request is a key query (Key) or a scan (All) of an app over its shards.
type Request struct {
	App shard.App
	Key string
	All bool
	// Partial accepts an answer built without the shards whose spec in
	// etcd does not decode (Answer.Partial says which); without it such an
	// answer is an error wrapping ErrIncomplete.
	Partial bool
}

// Answer is what Ask gathered.
type Answer struct {
	// Route is the shards asked, and why.
	Route Route
	// PerShard is each asked shard's values.
	PerShard map[string]map[string]string
	// Merged is the values merged over the shards with the app's Merge.
	Merged map[string]string
	// Partial is, when the request accepted it, why the answer may miss
	// shards (nil when it misses none).
	Partial error
}

// ErrNotAnswered marks a query some routed shard did not answer: it has no
// primary, its primary is not PRIMARY yet, or it did not reply. During a
// failover this heals by itself, so a caller may ask again.
var ErrNotAnswered = errors.New("not every shard answered")

// ErrCannotMerge marks values the app cannot merge (no Merge, or Merge
// failed): asking again does not help.
var ErrCannotMerge = errors.New("cannot merge the shards' values")

// Ask is the one path of a query over an app's shards, for the CLI
// (`consumerd query`) and for the member's /v1/query alike: route the
// request (RouteFor), refuse an answer that would silently miss shards
// (Route.Incomplete, unless req.Partial), ask each routed shard's primary
// (Gather) and merge their values (Merge). Its errors wrap ErrIncomplete,
// ErrNotAnswered or ErrCannotMerge where they apply; any other error is the
// route's (an unknown topic, an app with no shards).
func Ask(ctx context.Context, hc *http.Client, topics TopicLookup, snap allocator.Snapshot, req Request) (Answer, error) {
	route, err := RouteFor(ctx, topics, snap, req.App, req.Key, req.All)
	if err != nil {
		return Answer{}, err
	}
	ans := Answer{Route: route}
	if err := route.Incomplete(); err != nil {
		if !req.Partial {
			return Answer{}, err
		}
		ans.Partial = err
	}
	if ans.PerShard, err = Gather(ctx, hc, snap, req.App, route.Shards, req.Key, req.All); err != nil {
		return Answer{}, fmt.Errorf("%w: %w", ErrNotAnswered, err)
	}
	if ans.Merged, err = Merge(req.App, route.Shards, ans.PerShard); err != nil {
		return Answer{}, fmt.Errorf("%w: %w", ErrCannotMerge, err)
	}
	return ans, nil
}
