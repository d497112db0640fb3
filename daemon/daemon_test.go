package daemon

import (
	"bytes"
	"encoding/json"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/shard"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go v1.55.0 (object store, reconnects): this goroutine may start
		// after the connection closed and then waits on a nil channel forever
		// (third party; recoverylog/snapshot ignores it for the same reason).
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
}

func TestEnvName(t *testing.T) {
	for flag, want := range map[string]string{
		"etcd.lease-ttl":           "CONSUMERD_ETCD_LEASE_TTL",
		"etcd.endpoints":           "CONSUMERD_ETCD_ENDPOINTS",
		"data-dir":                 "CONSUMERD_DATA_DIR",
		"embedded.etcd-client-url": "CONSUMERD_EMBEDDED_ETCD_CLIENT_URL",
		"app":                      "CONSUMERD_APP",
	} {
		if got := envName(flag); got != want {
			t.Errorf("envName(%q) = %q, want %q", flag, got, want)
		}
	}
}

// serveConfigFrom parses serve's flags from args and env, without running.
func serveConfigFrom(t *testing.T, args []string, env map[string]string) (serveConfig, error) {
	t.Helper()
	var cfg serveConfig
	cmd := &cobra.Command{Use: "serve", RunE: func(*cobra.Command, []string) error { return nil }}
	cfg.bindFlags(cmd.Flags(), []string{"wordcount"})
	if err := cmd.ParseFlags(args); err != nil {
		return cfg, err
	}
	err := applyEnv(cmd, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	return cfg, err
}

func TestFlagEnvPrecedence(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(serveConfig) bool
		wantErr string
	}{
		{"defaults", nil, nil, func(c serveConfig) bool {
			return c.LeaseTTL == 10*time.Second && c.EtcdPrefix == "/consumerd" && c.HTTPAddr == "127.0.0.1:8080" &&
				c.Limit == 1024 && c.Zone == "local" && c.DataDir == "./consumerd-data" && len(c.Apps) == 1 && c.Apps[0] == "wordcount" &&
				c.EmbeddedEtcd() && c.EmbeddedWAL()
		}, ""},
		{"env sets", nil, map[string]string{"CONSUMERD_ETCD_LEASE_TTL": "3s", "CONSUMERD_ETCD_ENDPOINTS": "a:1,b:2", "CONSUMERD_MEMBER_LIMIT": "7"},
			func(c serveConfig) bool {
				return c.LeaseTTL == 3*time.Second && len(c.EtcdEndpoints) == 2 && c.EtcdEndpoints[1] == "b:2" && c.Limit == 7 && !c.EmbeddedEtcd()
			}, ""},
		{"flag wins over env", []string{"--etcd.lease-ttl", "5s", "--etcd.endpoints", "x:1"},
			map[string]string{"CONSUMERD_ETCD_LEASE_TTL": "3s", "CONSUMERD_ETCD_ENDPOINTS": "a:1,b:2"},
			func(c serveConfig) bool {
				return c.LeaseTTL == 5*time.Second && len(c.EtcdEndpoints) == 1 && c.EtcdEndpoints[0] == "x:1"
			}, ""},
		{"bad env value", nil, map[string]string{"CONSUMERD_ETCD_LEASE_TTL": "soon"}, nil, "CONSUMERD_ETCD_LEASE_TTL"},
		{"namespace from env", nil, map[string]string{"CONSUMERD_WAL_NAMESPACE": "blue"}, func(c serveConfig) bool {
			return c.WALNamespace == "blue"
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := serveConfigFrom(t, tc.args, tc.env)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(cfg) {
				t.Fatalf("unexpected config %+v", cfg)
			}
		})
	}
}

func TestServeConfigValidate(t *testing.T) {
	cases := []struct {
		args     []string
		wantFlag string // "" = valid
	}{
		{nil, ""},
		{[]string{"--etcd.endpoints", "10.0.0.1:2379", "--wal.url", "nats://10.0.0.1:4222", "--wal.replicas", "3"}, ""},
		{[]string{"--etcd.lease-ttl", "1500ms"}, "--etcd.lease-ttl"},
		{[]string{"--etcd.lease-ttl", "0s"}, "--etcd.lease-ttl"},
		{[]string{"--etcd.prefix", "consumerd"}, "--etcd.prefix"},
		{[]string{"--etcd.prefix", "/consumerd/"}, "--etcd.prefix"},
		{[]string{"--etcd.prefix", "/a/b_c.d"}, ""},
		{[]string{"--etcd.prefix", "/OBJ"}, `--etcd.prefix: etcd prefix "/OBJ" gives namespace "OBJ": reserved`},
		{[]string{"--etcd.prefix", "/" + strings.Repeat("p", 65)}, "set --wal.namespace"},
		{[]string{"--etcd.prefix", "/OBJ", "--wal.namespace", "objects"}, ""},
		{[]string{"--wal.namespace", "blue-2"}, ""},
		{[]string{"--wal.namespace", "a_b"}, `--wal.namespace: namespace "a_b": illegal byte '_'`},
		{[]string{"--wal.namespace", "a.b"}, `--wal.namespace: namespace "a.b"`},
		{[]string{"--wal.namespace", "KV"}, `--wal.namespace: namespace "KV": reserved`},
		{[]string{"--wal.url", "localhost"}, "--wal.url"},
		{[]string{"--wal.sync", "sometimes"}, "--wal.sync"},
		{[]string{"--wal.sync", "always"}, ""},
		{[]string{"--wal.sync", "always", "--wal.url", "nats://10.0.0.1:4222"}, "--wal.sync: 'always' configures the embedded nats-server"},
		{[]string{"--wal.replicas", "0"}, "--wal.replicas"},
		{[]string{"--member.id", "a/b"}, "--member.id"},
		{[]string{"--member.zone", ""}, "--member.zone"},
		{[]string{"--member.id", ".."}, `--member.id: ".." is not allowed`},
		{[]string{"--member.zone", strings.Repeat("z", 201)}, "--member.zone: \"zzzz"},
		{[]string{"--member.limit", "-1"}, "--member.limit"},
		{[]string{"--http.addr", "8080"}, "--http.addr"},
		{[]string{"--http.advertise", "node7:8080"}, "--http.advertise"},
		{[]string{"--log.level", "loud"}, "--log.level"},
		{[]string{"--log.format", "xml"}, "--log.format"},
		{[]string{"--shutdown-timeout", "0s"}, "--shutdown-timeout"},
		{[]string{"--embedded.etcd-client-url", "127.0.0.1:2379"}, "--embedded.etcd-client-url"},
		{[]string{"--embedded.nats-addr", "4222"}, "--embedded.nats-addr"},
		{[]string{"--embedded.shards", "-1"}, "--embedded.shards"},
	}
	for _, tc := range cases {
		cfg, err := serveConfigFrom(t, tc.args, nil)
		if err != nil {
			t.Fatalf("%v: parse: %v", tc.args, err)
		}
		err = cfg.Validate()
		switch {
		case tc.wantFlag == "" && err != nil:
			t.Errorf("%v: unexpected error %v", tc.args, err)
		case tc.wantFlag != "" && (err == nil || !strings.Contains(err.Error(), tc.wantFlag)):
			t.Errorf("%v: err = %v, want one naming %s", tc.args, err, tc.wantFlag)
		}
	}
}

// The one derivation: --wal.namespace when given, else the etcd prefix's.
func TestWALNamespace(t *testing.T) {
	for _, tc := range []struct{ explicit, prefix, want string }{
		{"", "/consumerd", "consumerd"},
		{"", "/alpha", "alpha"},
		{"", "/a/b-c", "a-sb--c"},
		{"blue", "/consumerd", "blue"},
		{"consumerd", "/alpha", "consumerd"},
	} {
		if got, err := walNamespace(tc.explicit, tc.prefix); err != nil || got != tc.want {
			t.Errorf("walNamespace(%q, %q) = %q, %v; want %q", tc.explicit, tc.prefix, got, err, tc.want)
		}
	}
}

// TestParseApplyFile runs every testdata/apply/<name>.{yaml,json} through
// parseApplyFile and compares with <name>.golden: the parsed entries as
// JSON, or "error: <message>".
func TestAdvertiseURL(t *testing.T) {
	host := func() (string, error) { return "node7", nil }
	for _, tc := range []struct{ flag, addr, want string }{
		{"", "127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"", "0.0.0.0:8080", "http://node7:8080"},
		{"", "[::]:9000", "http://node7:9000"},
		{"https://lb.example:443/", "0.0.0.0:8080", "https://lb.example:443"},
	} {
		addr, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := advertiseURL(tc.flag, "http", addr, host); got != tc.want {
			t.Errorf("advertiseURL(%q, %s) = %q, want %q", tc.flag, tc.addr, got, tc.want)
		}
	}
}

func TestParseApplyFile(t *testing.T) {
	apps := map[string]shard.App{"wordcount": wordcount.App()}
	files, _ := filepath.Glob("testdata/apply/*.*")
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".golden") {
			continue
		}
		n++
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			entries, err := parseApplyFile(data, apps)
			var got string
			if err != nil {
				got = "error: " + err.Error() + "\n"
			} else {
				type out struct {
					ID     string      `json:"id"`
					Delete bool        `json:"delete,omitempty"`
					Spec   *shard.Spec `json:"spec,omitempty"`
				}
				var outs []out
				for _, e := range entries {
					outs = append(outs, out{e.ID, e.Delete, e.Spec})
				}
				b, _ := json.MarshalIndent(outs, "", "  ")
				got = string(b) + "\n"
			}
			golden := strings.TrimSuffix(f, filepath.Ext(f)) + "." + filepath.Ext(f)[1:] + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("golden: %v (run with -update to create)", err)
			}
			if got != string(want) {
				t.Fatalf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
	if n == 0 {
		t.Fatal("no testdata/apply cases")
	}
}

func testSnapshot() allocator.Snapshot {
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

func TestShardRows(t *testing.T) {
	rows := shardRows(testSnapshot())
	b, _ := json.Marshal(rows)
	want := `[{"id":"wc-0","status":"PRIMARY","primary":"m1","primary_zone":"a","replicas":[{"member":"m1","zone":"a","slot":0,"state":"PRIMARY"},{"member":"m2","zone":"b","slot":1,"state":"STANDBY"}],"lag":{}},` +
		`{"id":"wc-1","status":"UNASSIGNED","primary":"","replicas":[{"member":"m2","zone":"b","slot":1,"state":"FAILED","error":"boom"}],"lag":{}},` +
		`{"id":"wc-2","status":"DISABLED","primary":"","replicas":[],"lag":{}},` +
		`{"id":"wc-3","status":"INVALID","error":"shard spec \"wc-3\": bad","primary":"m1","primary_zone":"a","replicas":[{"member":"m1","zone":"a","slot":0,"state":"PRIMARY"}],"lag":{}}]`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
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

func TestMemberRows(t *testing.T) {
	b, _ := json.Marshal(memberRows(testSnapshot()))
	want := `[{"id":"m1","zone":"a","endpoint":"http://h1:8080","item_limit":10,"exiting":false,"leader":false},` +
		`{"id":"m2","zone":"b","endpoint":"http://h2:8080","item_limit":20,"exiting":true,"leader":true}]`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	if othersToTakeOver(testSnapshot(), "a", "m1") {
		t.Error("m2 is exiting: nobody can take over from m1")
	}
	if !othersToTakeOver(testSnapshot(), "b", "m2") {
		t.Error("m1 can take over from m2")
	}
}

func TestReadiness(t *testing.T) {
	cases := []struct {
		name     string
		session  bool
		replicas []StatusReplica
		ready    bool
	}{
		{"no session", false, nil, false},
		{"idle member", true, nil, true},
		{"primary serving, standby backfilling", true, []StatusReplica{{Shard: "a", Slot: 0, State: "PRIMARY"}, {Shard: "b", Slot: 1, State: "BACKFILL"}}, true},
		{"primary still backfilling", true, []StatusReplica{{Shard: "a", Slot: 0, State: "BACKFILL"}}, false},
		{"failed standby", true, []StatusReplica{{Shard: "a", Slot: 1, State: "FAILED", Error: "x"}}, false},
	}
	for _, tc := range cases {
		if got, why := readiness(tc.session, tc.replicas); got != tc.ready || (!got && len(why) == 0) {
			t.Errorf("%s: ready=%v (%v), want %v", tc.name, got, why, tc.ready)
		}
	}
}

func TestMergeShards(t *testing.T) {
	app := wordcount.App()
	got, err := mergeShards(app, []string{"s0", "s1", "s2"}, map[string]map[string]string{
		"s0": {"cat": "2", "dog": "1"}, "s1": {"cat": "3"}, "s2": {},
	})
	if err != nil || got["cat"] != "5" || got["dog"] != "1" || len(got) != 2 {
		t.Fatalf("merge = %v, %v", got, err)
	}
	app.Merge = nil
	if _, err := mergeShards(app, []string{"s0", "s1"}, map[string]map[string]string{"s0": {"k": "1"}, "s1": {"k": "2"}}); err == nil ||
		!strings.Contains(err.Error(), `"k"`) {
		t.Fatalf("want an error naming the key without Merge, got %v", err)
	}
	var buf bytes.Buffer
	if n, _ := writeKeyValues(&buf, map[string]string{"b": "2", "a": "10"}, false); buf.String() != "a 10\nb 2\n" || n != 0 {
		t.Fatalf("writeKeyValues: %q, %d ambiguous", buf.String(), n)
	}
	// Keys are bytes: keys differing only in bytes that are not UTF-8 stay
	// apart, sorted by their bytes; --hex-keys shows them unambiguously.
	binary := map[string]string{"a\xffb": "1", "a\xfeb": "2", "a\uFFFDb": "3", "": "4", "a b": "5", "ab": "6"}
	got, err = mergeShards(wordcount.App(), []string{"s0", "s1"}, map[string]map[string]string{"s0": binary, "s1": {"a\xffb": "9"}})
	if err != nil || len(got) != 6 || got["a\xffb"] != "10" || got["a\xfeb"] != "2" {
		t.Fatalf("merge of binary keys = %q, %v", got, err)
	}
	buf.Reset()
	if n, _ := writeKeyValues(&buf, binary, false); buf.String() != " 4\na b 5\nab 6\na\uFFFDb 3\na\xfeb 2\na\xffb 1\n" || n != 5 {
		t.Fatalf("writeKeyValues of binary keys: %q, %d ambiguous, want 5", buf.String(), n)
	}
	buf.Reset()
	if n, _ := writeKeyValues(&buf, binary, true); buf.String() != " 4\n612062 5\n6162 6\n61efbfbd62 3\n61fe62 2\n61ff62 1\n" || n != 0 {
		t.Fatalf("writeKeyValues --hex-keys: %q, %d ambiguous", buf.String(), n)
	}
}

// TestRunUsageErrors runs the command tree in-process: bad input returns
// exit code 2 with a message naming the problem.
func TestRunUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"serve", "--bogus"}, nil, "--bogus"},
		{[]string{"serve", "--app", "nope"}, nil, `unknown app "nope"`},
		{[]string{"serve", "--member.limit", "x"}, nil, "member.limit"},
		{[]string{"serve"}, map[string]string{"CONSUMERD_LOG_FORMAT": "xml"}, "--log.format"},
		{[]string{"shards", "create", "--app", "wordcount", "--count", "0"}, nil, "--count"},
		{[]string{"shards", "unassign"}, nil, "--failed"},
		{[]string{"shards", "list", "-o", "yaml"}, nil, "-o"},
		{[]string{"publish"}, nil, "topic"},
		{[]string{"publish", "--topic", "t", "--format", "csv"}, nil, "--format"},
		{[]string{"publish", "--topic", "t", "--key-field", "id"}, nil, "--key-field: only with --format json"},
		{[]string{"publish", "--topic", "t", "--timeout", "0s"}, nil, "--timeout"},
		{[]string{"publish", "--topic", "t", "--id", "a b"}, nil, "--id"},
		{[]string{"topics", "create", "--name", "t", "--partitions", "0"}, nil, "partitions 0 out of range"},
		{[]string{"topics", "create", "--name", "t", "--partitions", "10001"}, nil, "out of range"},
		{[]string{"topics", "create", "--name", "..", "--partitions", "1"}, nil, "topic name"},
		{[]string{"topics", "delete", "--name", "a/b"}, nil, "--name"},
		{[]string{"topics", "list", "-o", "yaml"}, nil, "-o"},
		{[]string{"publish", "--topic", "words", "--wal.namespace", "a.b"}, nil, `--wal.namespace: namespace "a.b": illegal byte '.'`},
		{[]string{"shards", "list", "--etcd.prefix", "/KV"}, nil, `--etcd.prefix: etcd prefix "/KV" gives namespace "KV": reserved`},
		{[]string{"shards", "recover", "--shard", "s", "--dir", "x"}, map[string]string{"CONSUMERD_WAL_NAMESPACE": "OBJ"}, `--wal.namespace: namespace "OBJ": reserved`},
		{[]string{"read"}, nil, "topic"},
		{[]string{"read", "--topic", "t", "--from", "5"}, nil, "--from 5: a message id is a position in one partition; give --partition"},
		{[]string{"read", "--topic", "t", "--from", "soon"}, nil, `--from: "soon" is not start, end or a message id`},
		{[]string{"read", "--topic", "t", "--partition", "0", "--from", "0"}, nil, `--from: "0" is not start, end or a message id`},
		{[]string{"read", "--topic", "t", "--partition", "-1"}, nil, "--partition: -1 must be 0 or more"},
		{[]string{"read", "--topic", "t", "-o", "yaml"}, nil, `-o: "yaml" must be one of lines, json`},
		{[]string{"read", "--topic", "a/b"}, nil, "--topic"},
		{[]string{"query", "--app", "wordcount"}, nil, "give exactly one of --key K, --key-hex HEX or --all"},
		{[]string{"query", "--app", "wordcount", "--key", "a", "--key-hex", "61"}, nil, "give exactly one of"},
		{[]string{"query", "--app", "wordcount", "--key", "a", "--all"}, nil, "give exactly one of"},
		{[]string{"query", "--app", "wordcount", "--key-hex", "zz"}, nil, `--key-hex: "zz" is not hex`},
		{[]string{"query", "--app", "wordcount", "--key-hex", "abc"}, nil, `--key-hex: "abc" is not hex`},
		{[]string{"query", "--app", "wordcount", "--key", "a", "--hex-keys"}, nil, "--hex-keys: only with --all"},
	}
	for _, tc := range cases {
		var out, errb bytes.Buffer
		code := Run(t.Context(), tc.args, Options{
			Apps: []shard.App{wordcount.App()}, Stdout: &out, Stderr: &errb, Stdin: strings.NewReader(""),
			LookupEnv: func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok },
		})
		if code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: code %d stderr %q, want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// TestJSONLogDurations: JSON logs print durations as Go duration strings,
// also through loggers derived with With and Named.
func TestJSONLogDurations(t *testing.T) {
	var b bytes.Buffer
	l := newLogger("info", "json", &b)
	l.Named("shard").With("since", 1500*time.Millisecond).Info("caught up", "took", 2*time.Second, "n", 3)
	var line map[string]any
	if err := json.Unmarshal(b.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, b.String())
	}
	if line["took"] != "2s" || line["since"] != "1.5s" || line["n"] != float64(3) {
		t.Fatalf("JSON log line %s: want took \"2s\", since \"1.5s\", n 3", b.String())
	}
}

// TestShardRowsRestarts: a shard's restart record shows in -o json and as a
// RESTARTS line after the table: a pending restart with its time while its
// failure is there, a given-up one with what to run.
func TestShardRowsRestarts(t *testing.T) {
	snap := testSnapshot()
	snap.Assignments[2].ModRevision = 42 // wc-1's FAILED standby
	at := time.Date(2026, 12, 2, 3, 4, 5, 0, time.UTC)
	snap.Restarts = map[string]allocator.RestartRecord{
		"wc-1": {Attempts: 1, MaxAttempts: 3, Failure: 42, Error: "boom", NotBefore: at, LastRestart: at.Add(-time.Minute)},
		"wc-0": {Attempts: 3, MaxAttempts: 3, Failure: 7, Exhausted: true},
	}
	rows := shardRows(snap)
	if r := rows[1].Restarts; r == nil || r.NextAt != "2026-12-02T03:04:05Z" || r.Attempts != 1 || r.MaxAttempts != 3 || r.LastError != "boom" {
		t.Fatalf("wc-1 restarts: %+v", r)
	}
	var errs bytes.Buffer
	writeReplicaErrors(&errs, rows)
	want := "RESTARTS wc-0: 3 of 3 automatic restarts; given up: 'consumerd shards unassign --failed' restarts it and the count\n" +
		"FAILED wc-1 on b/m2 slot 1: boom\nRESTARTS wc-1: 1 of 3 automatic restarts; next at 2026-12-02T03:04:05Z\n"
	if errs.String() != want {
		t.Fatalf("lines after the table:\n%s\nwant:\n%s", errs.String(), want)
	}
}
