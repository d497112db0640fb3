package query

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/daemon/internal/clustertest"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/consumerd/consumerd/topic"
)

func TestRouteQuery(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := t.Context()
	snap := clustertest.Snapshot() // wc-0 reads words/0, wc-1 words/1, wc-2 (disabled) words/2
	lookup := func(ctx context.Context, name string) (topic.Description, error) {
		return (&topic.Registry{Client: cli, Prefix: "/consumerd"}).Get(ctx, name)
	}
	keyIn := func(p, n int) string {
		for i := 0; ; i++ {
			if k := fmt.Sprint("k", i); topic.PartitionFor(k, n) == p {
				return k
			}
		}
	}
	route := func(keyedBy, key string, all bool) string {
		app := wordcount.App()
		app.KeyedBy = keyedBy
		r, err := RouteFor(ctx, lookup, snap, app, key, all)
		if err != nil {
			return "error: " + err.Error()
		}
		return strings.Join(r.Shards, ",")
	}
	if got := route("words", "k", false); !strings.Contains(got, `app wordcount is keyed by topic words: topic "words" does not exist`) {
		t.Fatalf("keyed by a topic without a record: %s", got)
	}
	if _, err := (&topic.Registry{Client: cli, Prefix: "/consumerd"}).Create(ctx, topic.Description{Name: "words", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		keyedBy, key string
		all          bool
		want         string
	}{
		{"", "any", false, "wc-0,wc-1"}, // not keyed: every enabled shard
		{"words", keyIn(0, 3), false, "wc-0"},
		{"words", keyIn(1, 3), false, "wc-1"},
		{"words", keyIn(2, 3), false, fmt.Sprintf(`error: key %q is placed in partition 2 of topic words, which only disabled shard(s) wc-2 of app wordcount read`, keyIn(2, 3))},
		{"words", keyIn(0, 3), true, "wc-0,wc-1"}, // a scan asks every shard
	} {
		if got := route(tc.keyedBy, tc.key, tc.all); got != tc.want {
			t.Errorf("route(keyed by %q, key %q, all %v) = %s, want %s", tc.keyedBy, tc.key, tc.all, got, tc.want)
		}
	}
	// Partitions no shard reads at all.
	if _, err := cli.Put(ctx, topic.Key("/consumerd", "words"), string(topic.Description{Name: "words", Partitions: 5}.Encode())); err != nil {
		t.Fatal(err)
	}
	if got, want := route("words", keyIn(4, 5), false), fmt.Sprintf(`error: key %q is placed in partition 4 of topic words, which no shard of app wordcount reads`, keyIn(4, 5)); got != want {
		t.Errorf("key of an unread partition: %s, want %s", got, want)
	}
	other := wordcount.App()
	other.Name = "other"
	// wc-3's spec does not decode: every route carries it, and an app with
	// no valid shard says why.
	r, err := RouteFor(ctx, lookup, snap, wordcount.App(), "k", false)
	if err != nil || fmt.Sprint(r.Invalid) != `[shard spec "wc-3": bad]` || r.Incomplete() == nil {
		t.Errorf("route over an invalid spec: %+v, %v; want wc-3 in Invalid", r, err)
	}
	if _, err := RouteFor(ctx, lookup, snap, other, "k", false); err == nil || !strings.HasPrefix(err.Error(), "app other has no valid shards: ") {
		t.Errorf("app without valid shards: %v", err)
	}
	snap.InvalidItems = nil
	if _, err := RouteFor(ctx, lookup, snap, other, "k", false); err == nil || err.Error() != "app other has no shards" {
		t.Errorf("app without shards: %v", err)
	}
}
