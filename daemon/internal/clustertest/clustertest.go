// Package clustertest holds fixtures for the tests of the daemon's
// packages: a cluster view with one of each case the views must show.
package clustertest

import (
	"time"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/shard"
)

// Snapshot is a keyspace of two members in zones a and b (m2 exiting and
// the leader) and four wordcount shards: wc-0 reads words/0 (PRIMARY on
// a/m1, STANDBY on b/m2), wc-1 reads words/1 (no primary; a FAILED standby
// on b/m2), wc-2 reads words/2 and is disabled, and wc-3's spec does not
// decode (a PRIMARY on a/m1 all the same).
func Snapshot() allocator.Snapshot {
	spec := func(id string, p int, disable bool) allocator.ItemInfo {
		return allocator.ItemInfo{ID: id, Item: &shard.Spec{ID: id, App: "wordcount", Sources: []shard.Source{{Topic: "words", Partition: p}}, Disable: disable}}
	}
	return allocator.Snapshot{
		Members: []allocator.MemberInfo{
			{Zone: "a", ID: "m1", Spec: allocator.MemberSpec{Endpoint: "http://h1:8080", ItemLimit: 10}},
			{Zone: "b", ID: "m2", Spec: allocator.MemberSpec{Endpoint: "http://h2:8080", ItemLimit: 20, Exiting: true}},
		},
		Items: map[string]allocator.ItemInfo{"wc-0": spec("wc-0", 0, false), "wc-1": spec("wc-1", 1, false), "wc-2": spec("wc-2", 2, true)},
		Assignments: []allocator.Assignment{
			{Item: "wc-0", Zone: "a", Member: "m1", Slot: 0, Status: allocator.ReplicaStatus{State: allocator.StatePrimary}},
			{Item: "wc-0", Zone: "b", Member: "m2", Slot: 1, Status: allocator.ReplicaStatus{State: allocator.StateStandby}},
			{Item: "wc-1", Zone: "b", Member: "m2", Slot: 1, Status: allocator.ReplicaStatus{State: allocator.StateFailed, Error: "boom"}},
			{Item: "wc-3", Zone: "a", Member: "m1", Slot: 0, Status: allocator.ReplicaStatus{State: allocator.StatePrimary}},
		},
		InvalidItems: map[string]string{"wc-3": `shard spec "wc-3": bad`},
		Leader:       "b/m2",
	}
}

// WithRestarts is Snapshot with the leader's restart records: wc-1's FAILED
// standby (ModRevision 42) is due for its second of 3 restarts at
// 2026-12-02T03:04:05Z, and wc-0 gave up after 3.
func WithRestarts() allocator.Snapshot {
	snap := Snapshot()
	snap.Assignments[2].ModRevision = 42 // wc-1's FAILED standby
	at := time.Date(2026, 12, 2, 3, 4, 5, 0, time.UTC)
	snap.Restarts = map[string]allocator.RestartRecord{
		"wc-1": {Attempts: 1, MaxAttempts: 3, Failure: 42, Error: "boom", NotBefore: at, LastRestart: at.Add(-time.Minute)},
		"wc-0": {Attempts: 3, MaxAttempts: 3, Failure: 7, Exhausted: true},
	}
	return snap
}
