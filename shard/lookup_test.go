package shard

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/consumerd/consumerd/allocator"
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

func TestSpecsAndPrimaryOf(t *testing.T) {
	const parts = 4
	var specs []*Spec
	for i := 0; i < parts; i++ {
		specs = append(specs, &Spec{ID: fmt.Sprintf("wc-%d", i), App: "wordcount", Sources: []Source{{Topic: "words", Partition: i}}})
	}
	specs = append(specs, &Spec{ID: "other-0", App: "other", Sources: []Source{{Topic: "clicks", Partition: 0}}})
	snap := snapshotOf(t, specs, nil, nil)

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
}
