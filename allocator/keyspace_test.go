package allocator

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/consumerd/consumerd/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func putJSON(t *testing.T, c *clientv3.Client, key string, v any) int64 {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Put(context.Background(), key, string(b))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func TestKeySpaceLoadWatchCompaction(t *testing.T) {
	c := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const p = "/ks"
	putJSON(t, c, MemberKey(p, "a", "m1"), MemberSpec{ItemLimit: 5})
	putJSON(t, c, ItemKey(p, "s1"), map[string]any{"hot_standbys": 1})
	putJSON(t, c, AssignmentKey(p, Assignment{Item: "s1", Zone: "a", Member: "m1", Slot: 0}), ReplicaStatus{State: StatePrimary})
	// Malformed: skipped, not fatal.
	if _, err := c.Put(ctx, ItemKey(p, "bad"), "{"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, p+"/assign/s1/a/m1/notaslot", `{"state":"IDLE"}`); err != nil {
		t.Fatal(err)
	}
	// Outside the root: ignored.
	putJSON(t, c, "/other/items/x", map[string]any{})

	ks := NewKeySpace(c, p, nil, nil)
	if err := ks.Load(ctx); err != nil {
		t.Fatal(err)
	}
	snap := ks.Snapshot()
	if len(snap.Members) != 1 || snap.Members[0].Spec.ItemLimit != 5 || snap.Leader != "a/m1" {
		t.Fatalf("members %+v leader %q", snap.Members, snap.Leader)
	}
	if len(snap.Items) != 1 || snap.Items["s1"].Item.DesiredReplication() != 2 {
		t.Fatalf("items %+v", snap.Items)
	}
	if len(snap.Assignments) != 1 || snap.Assignments[0].Status.State != StatePrimary {
		t.Fatalf("assignments %+v", snap.Assignments)
	}
	// The malformed item is not an item, but it is reported.
	if e := snap.InvalidItems["bad"]; len(snap.InvalidItems) != 1 || !strings.Contains(e, "unexpected end of JSON") {
		t.Fatalf("invalid items %v", snap.InvalidItems)
	}

	// Changes while nobody watches, then compaction past the mirror's revision:
	// Watch must notice and reload.
	putJSON(t, c, ItemKey(p, "s2"), map[string]any{"hot_standbys": 0})
	rev := putJSON(t, c, ItemKey(p, "s1"), map[string]any{"disable": true})
	if _, err := c.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	defer watchInBackground(ctx, ks)()
	if err := ks.WaitForRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	snap = ks.Snapshot()
	if len(snap.Items) != 2 || snap.Items["s1"].Item.DesiredReplication() != 0 {
		t.Fatalf("after compaction: items %+v", snap.Items)
	}

	// Live changes: a value turning malformed drops the key; deletes apply.
	if _, err := c.Put(ctx, ItemKey(p, "s2"), "not json"); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Delete(ctx, MemberKey(p, "a", "m1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.WaitForRevision(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	snap = ks.Snapshot()
	if _, ok := snap.Items["s2"]; ok || len(snap.Members) != 0 || snap.Leader != "" {
		t.Fatalf("after updates: items %v members %v leader %q", snap.Items, snap.Members, snap.Leader)
	}
	if _, ok := snap.InvalidItems["s2"]; !ok {
		t.Fatalf("s2 turned malformed but is not reported: %v", snap.InvalidItems)
	}
	// Fixing one and deleting the other clear them.
	putJSON(t, c, ItemKey(p, "s2"), map[string]any{"hot_standbys": 0})
	resp, err = c.Delete(ctx, ItemKey(p, "bad"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.WaitForRevision(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if snap = ks.Snapshot(); len(snap.InvalidItems) != 0 || len(snap.Items) != 2 {
		t.Fatalf("after fixing: items %v invalid %v", snap.Items, snap.InvalidItems)
	}
	// WaitForRevision honours its context.
	short, scancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer scancel()
	if err := ks.WaitForRevision(short, resp.Header.Revision+1000); err == nil || !strings.Contains(err.Error(), "revision") {
		t.Fatalf("WaitForRevision beyond head: %v", err)
	}
}

func TestKeysRoundTrip(t *testing.T) {
	a := Assignment{Item: "s-1.x", Zone: "z_1", Member: "m1", Slot: 3}
	k := AssignmentKey("/root/", a)
	if k != "/root/assign/s-1.x/z_1/m1/3" {
		t.Fatalf("key %q", k)
	}
	got, err := parseAssignmentKey("/root", k)
	if err != nil || got != a {
		t.Fatalf("parse %q: %+v %v", k, got, err)
	}
	for _, bad := range []string{
		"/root/assign/s1/z/m/-1", "/root/assign/s1/z/m/01", "/root/assign/s1/z/m", "/root/assign/s1/z/m/1/2",
		"/root/assign/s 1/z/m/1", "/other/assign/s1/z/m/1", "/root/assign/../z/m/1",
	} {
		if _, err := parseAssignmentKey("/root", bad); err == nil {
			t.Errorf("parseAssignmentKey(%q) accepted", bad)
		}
	}
	if z, id, err := parseMemberKey("/root", MemberKey("/root", "a", "m")); err != nil || z != "a" || id != "m" {
		t.Fatalf("member key: %v %v %v", z, id, err)
	}
	for _, bad := range []string{"/root/members/a", "/root/members/a/b/c", "/root/members/a/b!"} {
		if _, _, err := parseMemberKey("/root", bad); err == nil {
			t.Errorf("parseMemberKey(%q) accepted", bad)
		}
	}
	// The key parsers apply consumerd's one id rule (internal/ident).
	for _, id := range []string{"..", "a b", strings.Repeat("i", 201)} {
		if _, err := parseItemKey("/root", ItemKey("/root", id)); err == nil {
			t.Errorf("parseItemKey accepted item id %q", id)
		}
	}
	if id, err := parseItemKey("/root", ItemKey("/root", strings.Repeat("i", 200))); err != nil || len(id) != 200 {
		t.Errorf("parseItemKey rejected a 200-character id: %v", err)
	}
	if _, err := DecodeReplicaStatus([]byte(`{"state":"NOPE"}`)); err == nil {
		t.Error("unknown state accepted")
	}
	if _, err := DecodeGenericItem("x", []byte(`{"hot_standbys":-1}`)); err == nil {
		t.Error("negative hot_standbys accepted")
	}
	if _, err := decodeMemberSpec([]byte(`{"item_limit":-1}`)); err == nil {
		t.Error("negative item_limit accepted")
	}
}

func TestTruncateError(t *testing.T) {
	long := strings.Repeat("é", 3000) // 6000 bytes, 2 per character
	got := TruncateError(long)
	if len(got) > MaxErrorLen {
		t.Fatalf("len %d > %d", len(got), MaxErrorLen)
	}
	if !strings.HasSuffix(got, "…(truncated)") || !strings.HasPrefix(got, "é") {
		t.Fatalf("bad truncation: %q", got[len(got)-20:])
	}
	if !utf8.ValidString(got) {
		t.Fatal("split a UTF-8 sequence")
	}
	for _, s := range []string{"short", strings.Repeat("x", MaxErrorLen)} {
		if got := TruncateError(s); got != s {
			t.Fatalf("%d bytes were cut to %d", len(s), len(got))
		}
	}
}

// TestKeySpaceLocalIndex: Local is built from the per-member index, which
// follows puts, moves and deletes; LocalVersion changes at every change of
// the member's own assignments or of any item, and at nothing else.
func TestKeySpaceLocalIndex(t *testing.T) {
	c := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const p = "/ksi"
	putJSON(t, c, MemberKey(p, "a", "m1"), MemberSpec{ItemLimit: 5})
	putJSON(t, c, MemberKey(p, "b", "m2"), MemberSpec{ItemLimit: 5})
	putJSON(t, c, ItemKey(p, "s1"), map[string]any{"hot_standbys": 1})
	s1m1 := AssignmentKey(p, Assignment{Item: "s1", Zone: "a", Member: "m1", Slot: 0})
	putJSON(t, c, s1m1, ReplicaStatus{State: StatePrimary})

	ks := NewKeySpace(c, p, nil, nil)
	if err := ks.Load(ctx); err != nil {
		t.Fatal(err)
	}
	defer watchInBackground(ctx, ks)()

	items := func(zone, id string) string {
		var out []string
		for _, a := range ks.Local(zone, id).Assignments {
			out = append(out, a.Item+"/"+strconv.Itoa(a.Slot)+":"+string(a.Status.State))
		}
		return strings.Join(out, " ")
	}
	// step writes, waits for the mirror, and checks which members' local
	// versions changed and what their Local holds.
	step := func(what string, write func() int64, m1Changes, m2Changes bool, m1Want, m2Want string) {
		t.Helper()
		v1, v2 := ks.LocalVersion("a", "m1"), ks.LocalVersion("b", "m2")
		if err := ks.WaitForRevision(ctx, write()); err != nil {
			t.Fatal(err)
		}
		if got := ks.LocalVersion("a", "m1") != v1; got != m1Changes {
			t.Errorf("%s: m1's local version changed %v, want %v", what, got, m1Changes)
		}
		if got := ks.LocalVersion("b", "m2") != v2; got != m2Changes {
			t.Errorf("%s: m2's local version changed %v, want %v", what, got, m2Changes)
		}
		if got := items("a", "m1"); got != m1Want {
			t.Errorf("%s: m1 holds %q, want %q", what, got, m1Want)
		}
		if got := items("b", "m2"); got != m2Want {
			t.Errorf("%s: m2 holds %q, want %q", what, got, m2Want)
		}
	}
	s1m2 := AssignmentKey(p, Assignment{Item: "s1", Zone: "b", Member: "m2", Slot: 1})
	step("m2 gets a standby", func() int64 { return putJSON(t, c, s1m2, ReplicaStatus{State: StateIdle}) },
		false, true, "s1/0:PRIMARY", "s1/1:IDLE")
	step("m2's status", func() int64 { return putJSON(t, c, s1m2, ReplicaStatus{State: StateStandby}) },
		false, true, "s1/0:PRIMARY", "s1/1:STANDBY")
	step("a member's spec", func() int64 { return putJSON(t, c, MemberKey(p, "b", "m2"), MemberSpec{ItemLimit: 6}) },
		false, false, "s1/0:PRIMARY", "s1/1:STANDBY")
	step("an item", func() int64 { return putJSON(t, c, ItemKey(p, "s1"), map[string]any{"hot_standbys": 2}) },
		true, true, "s1/0:PRIMARY", "s1/1:STANDBY")
	step("m1's primary deleted", func() int64 {
		resp, err := c.Delete(ctx, s1m1)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}, true, false, "", "s1/1:STANDBY")
	step("an undecodable status", func() int64 {
		resp, err := c.Put(ctx, s1m2, "{")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}, false, true, "", "")
}

// watchInBackground runs ks.Watch on a goroutine until the returned stop
// is called; stop returns once Watch has.
func watchInBackground(ctx context.Context, ks *KeySpace) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ks.Watch(wctx)
	}()
	return func() { cancel(); <-done }
}
