package chaos

import (
	"slices"
	"testing"
	"time"
)

func TestDiffCounts(t *testing.T) {
	want := map[string]int64{"a": 2, "b": 1}
	if d := diffCounts("tally", want, map[string]int64{"a": 2, "b": 1}); d != nil {
		t.Fatalf("equal counts: %v", d)
	}
	got := diffCounts("tally", want, map[string]int64{"a": 3, "c": 1}) // a doubled, b lost, c invented
	wantDiff := []string{`tally: "a" is 3, want 2`, `tally: "b" is 0, want 1`, `tally: "c" is 1, want 0`}
	if !slices.Equal(got, wantDiff) {
		t.Fatalf("diff = %q, want %q", got, wantDiff)
	}
	many := map[string]int64{}
	for i := 0; i < maxListed+5; i++ {
		many[string(rune('a'+i))] = 1
	}
	if d := diffCounts("x", many, nil); len(d) != maxListed+1 || d[maxListed] != "x: and 5 more keys differ" {
		t.Fatalf("long diff = %q", d)
	}
}

func TestParseOutputs(t *testing.T) {
	got, err := parseQueryAll([]byte("h0 40\nu7 1\n"))
	if err != nil || got["h0"] != 40 || got["u7"] != 1 || len(got) != 2 {
		t.Fatalf("parseQueryAll = %v, %v", got, err)
	}
	if _, err := parseQueryAll([]byte("h0 forty\n")); err == nil {
		t.Fatal("parseQueryAll accepted a count that is not a number")
	}
	count, last, err := parseTopic([]byte("h0\t1\nu1\t1\nh0\t2\n"))
	if err != nil || count["h0"] != 2 || count["u1"] != 1 || last["h0"] != "2" {
		t.Fatalf("parseTopic = %v %v %v", count, last, err)
	}
	if d := diffLast(map[string]int64{"h0": 2, "u1": 1}, last); d != nil {
		t.Fatalf("diffLast = %v", d)
	}
	if d := diffLast(map[string]int64{"h0": 3, "u1": 1}, last); len(d) != 1 {
		t.Fatalf("diffLast with a stale total = %v", d)
	}
}

func TestShardProblems(t *testing.T) {
	rows := []shardRow{{ID: "split-0000", Status: "PRIMARY"}, {ID: "tally-0000", Status: "BACKFILL"}}
	rows[0].Replicas = append(rows[0].Replicas, struct {
		Member string `json:"member"`
		State  string `json:"state"`
		Error  string `json:"error"`
	}{Member: "m2", State: "FAILED", Error: "boom"})
	got := shardProblems(rows, []memberRow{{ID: "m1"}}, []string{"m1", "m2"})
	want := []string{"shard split-0000 replica on m2 is FAILED boom", "shard tally-0000 is BACKFILL ", "member m2 is not registered in etcd"}
	if !slices.Equal(got, want) {
		t.Fatalf("problems = %q, want %q", got, want)
	}
	if got := shardProblems(nil, nil, nil); len(got) != 1 {
		t.Fatalf("no shards: %q", got)
	}
}

// TestReportLine: the recovery figures come only from faults whose counts
// were exact again; an unmeasured one counts as a fault, not as 0 s.
func TestReportLine(t *testing.T) {
	r := Report{Seed: 3, Lines: 600, Anomalies: []string{"fault 3: publishing: gave up"}, Faults: []FaultResult{
		{Fault: Fault{Kind: MemberKill}, Recovered: 2 * time.Second},
		{Fault: Fault{Kind: NatsKill}, Recovered: 4 * time.Second},
		{Fault: Fault{Kind: NatsKill}},
		{Fault: Fault{Kind: MemberStop}},
	}}
	want := "CHAOS seed=3 faults=4 kinds=3 lines=600 anomalies=1 recover_p50=2s recover_max=4s by_kind=nats-kill:2,member-kill:1,member-stop:1"
	if got := r.Line(); got != want {
		t.Fatalf("line\n%s\nwant\n%s", got, want)
	}
}

// lostSourceProblem accepts only the shard FAILED for a lost source: a
// PRIMARY one (that skipped silently), one FAILED for another reason, or an
// absent one are problems.
func TestLostSourceProblem(t *testing.T) {
	row := func(id, status, state, err string) shardRow {
		r := shardRow{ID: id, Status: status}
		r.Replicas = append(r.Replicas, struct {
			Member string `json:"member"`
			State  string `json:"state"`
			Error  string `json:"error"`
		}{Member: "m1", State: state, Error: err})
		return r
	}
	lost := "source lines/0002 (topic lines, partition 2): a source lost messages the shard has not read: the channel was removed"
	for _, tc := range []struct {
		rows []shardRow
		ok   bool
	}{
		{[]shardRow{row("split-0001", "PRIMARY", "PRIMARY", ""), row("split-0002", "FAILED", "FAILED", lost)}, true},
		{[]shardRow{row("split-0002", "PRIMARY", "PRIMARY", "")}, false},
		{[]shardRow{row("split-0002", "FAILED", "FAILED", "consume: boom")}, false},
		{[]shardRow{row("split-0001", "FAILED", "FAILED", lost)}, false},
	} {
		if p := lostSourceProblem(tc.rows, "split-0002"); (p == nil) != tc.ok {
			t.Errorf("rows %+v: problems %v, want ok=%v", tc.rows, p, tc.ok)
		}
	}
}
