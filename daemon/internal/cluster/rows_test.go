package cluster

import (
	"encoding/json"
	"testing"

	"github.com/consumerd/consumerd/daemon/internal/clustertest"
)

func TestShardRows(t *testing.T) {
	rows := ShardRows(clustertest.Snapshot())
	b, _ := json.Marshal(rows)
	want := `[{"id":"wc-0","status":"PRIMARY","primary":"m1","primary_zone":"a","replicas":[{"member":"m1","zone":"a","slot":0,"state":"PRIMARY"},{"member":"m2","zone":"b","slot":1,"state":"STANDBY"}],"lag":{}},` +
		`{"id":"wc-1","status":"UNASSIGNED","primary":"","replicas":[{"member":"m2","zone":"b","slot":1,"state":"FAILED","error":"boom"}],"lag":{}},` +
		`{"id":"wc-2","status":"DISABLED","primary":"","replicas":[],"lag":{}},` +
		`{"id":"wc-3","status":"INVALID","error":"shard spec \"wc-3\": bad","primary":"m1","primary_zone":"a","replicas":[{"member":"m1","zone":"a","slot":0,"state":"PRIMARY"}],"lag":{}}]`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
}

func TestMemberRows(t *testing.T) {
	b, _ := json.Marshal(MemberRows(clustertest.Snapshot()))
	want := `[{"id":"m1","zone":"a","endpoint":"http://h1:8080","item_limit":10,"exiting":false,"leader":false},` +
		`{"id":"m2","zone":"b","endpoint":"http://h2:8080","item_limit":20,"exiting":true,"leader":true}]`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	if OthersToTakeOver(clustertest.Snapshot(), "a", "m1") {
		t.Error("m2 is exiting: nobody can take over from m1")
	}
	if !OthersToTakeOver(clustertest.Snapshot(), "b", "m2") {
		t.Error("m1 can take over from m2")
	}
}

// TestShardRowsRestarts: a shard's restart record shows in -o json and as a
// RESTARTS line after the table: a pending restart with its time while its
// failure is there, a given-up one with what to run.
func TestShardRowsRestarts(t *testing.T) {
	snap := clustertest.WithRestarts()
	rows := ShardRows(snap)
	if r := rows[1].Restarts; r == nil || r.NextAt != "2026-12-02T03:04:05Z" || r.Attempts != 1 || r.MaxAttempts != 3 || r.LastError != "boom" {
		t.Fatalf("wc-1 restarts: %+v", r)
	}
}
