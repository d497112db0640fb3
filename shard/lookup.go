package shard

import (
	"github.com/consumerd/consumerd/allocator"
)

// Specs returns the shard specs of snap, sorted by id. An item that the
// snapshot's KeySpace did not decode as a *Spec is decoded from its raw
// value; one that is not a valid spec is left out. It and PrimaryOf are the
// lookups the daemon's query routing and client commands use, on a member's
// mirror or on a snapshot they loaded themselves.
func Specs(snap allocator.Snapshot) []*Spec {
	out := make([]*Spec, 0, len(snap.Items))
	for id, it := range snap.Items {
		if s, ok := it.Item.(*Spec); ok && s != nil {
			out = append(out, s)
			continue
		}
		if s, err := decodeSpec(id, it.Raw); err == nil {
			out = append(out, s)
		}
	}
	sortSpecs(out)
	return out
}

// PrimaryOf returns shard shardID's slot-0 assignment in snap and the
// endpoint its member announced. ok is false when the shard has no slot-0
// assignment; endpoint is "" when the member's key is gone (its lease is
// expiring) or it announced none.
func PrimaryOf(snap allocator.Snapshot, shardID string) (a allocator.Assignment, endpoint string, ok bool) {
	for _, asg := range snap.Assignments {
		if asg.Item != shardID || asg.Slot != 0 {
			continue
		}
		for _, m := range snap.Members {
			if m.Zone == asg.Zone && m.ID == asg.Member {
				return asg, m.Spec.Endpoint, true
			}
		}
		return asg, "", true
	}
	return allocator.Assignment{}, "", false
}
