package shard

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/topic"
)

// snapshotOf builds a mirror snapshot: specs, members and assignments.
func snapshotOf(t *testing.T, specs []*Spec, members map[string]string, asg [][3]string) allocator.Snapshot {
	t.Helper()
	snap := allocator.Snapshot{Items: map[string]allocator.ItemInfo{}}
	for i, s := range specs {
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		info := allocator.ItemInfo{ID: s.ID, Raw: raw}
		if i%2 == 0 { // half decoded by DecodeSpec, half raw only
			info.Item = s
		}
		snap.Items[s.ID] = info
	}
	for id, ep := range members {
		snap.Members = append(snap.Members, allocator.MemberInfo{Zone: "z", ID: id, Spec: allocator.MemberSpec{Endpoint: ep}})
	}
	for _, a := range asg { // shard, member, slot
		slot := 0
		fmt.Sscan(a[2], &slot)
		snap.Assignments = append(snap.Assignments, allocator.Assignment{Item: a[0], Zone: "z", Member: a[1], Slot: slot})
	}
	return snap
}

func TestResolve(t *testing.T) {
	const parts = 4
	var specs []*Spec
	for i := 0; i < parts; i++ {
		specs = append(specs, &Spec{ID: fmt.Sprintf("wc-%d", i), App: "wordcount", Sources: []Source{{Topic: "words", Partition: i}}})
	}
	specs = append(specs, &Spec{ID: "other-0", App: "other", Sources: []Source{{Topic: "clicks", Partition: 0}}})
	snap := snapshotOf(t, specs,
		map[string]string{"m1": "http://m1", "m2": "http://m2"},
		[][3]string{{"wc-0", "m1", "0"}, {"wc-0", "m2", "1"}, {"wc-1", "m2", "0"}, {"wc-2", "m1", "0"}, {"other-0", "m2", "0"}})

	for _, key := range []string{"a", "b", "hello world", "x", "yy", "zzz"} {
		p := topic.PartitionFor(key, parts)
		id, ep, err := resolve(snap, "", "words", parts, key)
		wantID := fmt.Sprintf("wc-%d", p)
		if id != wantID {
			t.Errorf("%q: shard %q, want %q", key, id, wantID)
		}
		switch p {
		case 0, 2:
			if err != nil || ep != "http://m1" {
				t.Errorf("%q: %q %v", key, ep, err)
			}
		case 1:
			if err != nil || ep != "http://m2" {
				t.Errorf("%q: %q %v", key, ep, err)
			}
		case 3:
			if err == nil || !strings.Contains(err.Error(), "has no primary") {
				t.Errorf("%q: want no-primary error, got %q %v", key, ep, err)
			}
		}
	}
	if _, _, err := resolve(snap, "", "nope", 2, "k"); err == nil || !strings.Contains(err.Error(), "no shard consumes nope/") {
		t.Errorf("unknown topic: %v", err)
	}
	if _, _, err := resolve(snap, "", "words", 0, "k"); err == nil || !strings.Contains(err.Error(), "partitions must be at least 1") {
		t.Errorf("zero partitions: %v", err)
	}

	// Two apps on one partition: ambiguous unless the app is named.
	amb := snapshotOf(t, append(specs, &Spec{ID: "dup-0", App: "dup", Sources: []Source{{Topic: "clicks", Partition: 0}}}),
		map[string]string{"m1": "http://m1"}, [][3]string{{"dup-0", "m1", "0"}, {"other-0", "m1", "0"}})
	if _, _, err := resolve(amb, "", "clicks", 1, "k"); err == nil || !strings.Contains(err.Error(), "several shards") {
		t.Errorf("ambiguous: %v", err)
	}
	if id, ep, err := resolve(amb, "dup", "clicks", 1, "k"); err != nil || id != "dup-0" || ep != "http://m1" {
		t.Errorf("by app: %s %s %v", id, ep, err)
	}

	// Specs decodes raw items too, and sorts.
	var ids []string
	for _, s := range Specs(snap) {
		ids = append(ids, s.ID)
	}
	if want := []string{"other-0", "wc-0", "wc-1", "wc-2", "wc-3"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("Specs ids = %v, want %v", ids, want)
	}
	// PrimaryOf: slot 0 only; a slot-0 member without a member key has no
	// endpoint; a shard without slot 0 has no primary.
	gone := snapshotOf(t, specs, map[string]string{"m1": "http://m1"}, [][3]string{{"wc-0", "m2", "1"}, {"wc-0", "m1", "0"}, {"wc-1", "m3", "0"}})
	if a, ep, ok := PrimaryOf(gone, "wc-0"); !ok || a.Member != "m1" || a.Slot != 0 || ep != "http://m1" {
		t.Errorf("PrimaryOf(wc-0) = %+v %q %v", a, ep, ok)
	}
	if a, ep, ok := PrimaryOf(gone, "wc-1"); !ok || a.Member != "m3" || ep != "" {
		t.Errorf("PrimaryOf(wc-1) = %+v %q %v, want m3 without endpoint", a, ep, ok)
	}
	if _, _, ok := PrimaryOf(gone, "wc-2"); ok {
		t.Error("PrimaryOf(wc-2): no slot 0, yet ok")
	}

	got := primaries(snap, "wordcount")
	want := map[string]string{"wc-0": "http://m1", "wc-1": "http://m2", "wc-2": "http://m1", "wc-3": ""}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("primaries = %v, want %v", got, want)
	}
}
