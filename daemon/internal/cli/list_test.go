package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/daemon/internal/clustertest"
)

// TestShardTable: `shards list` prints every shard's replicas in one
// table, and each FAILED replica's error after it.
func TestShardTable(t *testing.T) {
	rows := cluster.ShardRows(clustertest.Snapshot())
	var buf bytes.Buffer
	if err := writeShardTable(&buf, rows); err != nil {
		t.Fatal(err)
	}
	var errs bytes.Buffer
	writeReplicaErrors(&errs, rows)
	if errs.String() != "FAILED wc-1 on b/m2 slot 1: boom\n" {
		t.Errorf("replica errors: %q", errs.String())
	}
	if !strings.Contains(buf.String(), "a/m1:0=PRIMARY,b/m2:1=STANDBY") || !strings.HasPrefix(buf.String(), "ID ") ||
		!strings.Contains(buf.String(), `INVALID: shard spec "wc-3": bad`) || !strings.Contains(buf.String(), "  a/m1     a/m1:0=PRIMARY,") {
		t.Fatalf("table:\n%s", buf.String())
	}
}

// TestRestartLines: a shard's restart record shows as a RESTARTS line after
// the table: a pending restart with its time while its failure is there, a
// given-up one with what to run.
func TestRestartLines(t *testing.T) {
	snap := clustertest.WithRestarts()
	rows := cluster.ShardRows(snap)
	var errs bytes.Buffer
	writeReplicaErrors(&errs, rows)
	want := "RESTARTS wc-0: 3 of 3 automatic restarts; given up: 'consumerd shards unassign --failed' restarts it and the count\n" +
		"FAILED wc-1 on b/m2 slot 1: boom\nRESTARTS wc-1: 1 of 3 automatic restarts; next at 2026-12-02T03:04:05Z\n"
	if errs.String() != want {
		t.Fatalf("lines after the table:\n%s\nwant:\n%s", errs.String(), want)
	}
}
