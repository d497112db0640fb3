package server

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/shard/rocksmem"
	"github.com/spf13/cobra"
)

// serveConfigFrom parses serve's flags from args and env, without running.
func serveConfigFrom(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	var cfg Config
	cmd := &cobra.Command{Use: "serve", RunE: func(*cobra.Command, []string) error { return nil }}
	cfg.Bind(cmd.Flags(), []string{"wordcount"})
	if err := cmd.ParseFlags(args); err != nil {
		return cfg, err
	}
	err := cmdline.ApplyEnv(cmd, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	return cfg, err
}

func TestFlagEnvPrecedence(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(Config) bool
		wantErr string
	}{
		{"defaults", nil, nil, func(c Config) bool {
			return c.LeaseTTL == 10*time.Second && c.EtcdPrefix == "/consumerd" && c.HTTPAddr == "127.0.0.1:8080" &&
				c.Limit == 1024 && c.Zone == "local" && c.RocksDBMemory == rocksmem.DefaultBytes() && c.RocksDBMemory >= 256<<20 && c.DataDir == "./consumerd-data" && len(c.Apps) == 1 && c.Apps[0] == "wordcount" &&
				c.EmbeddedEtcd() && c.EmbeddedWAL()
		}, ""},
		{"env sets", nil, map[string]string{"CONSUMERD_ETCD_LEASE_TTL": "3s", "CONSUMERD_ETCD_ENDPOINTS": "a:1,b:2", "CONSUMERD_MEMBER_LIMIT": "7"},
			func(c Config) bool {
				return c.LeaseTTL == 3*time.Second && len(c.EtcdEndpoints) == 2 && c.EtcdEndpoints[1] == "b:2" && c.Limit == 7 && !c.EmbeddedEtcd()
			}, ""},
		{"flag wins over env", []string{"--etcd.lease-ttl", "5s", "--etcd.endpoints", "x:1"},
			map[string]string{"CONSUMERD_ETCD_LEASE_TTL": "3s", "CONSUMERD_ETCD_ENDPOINTS": "a:1,b:2"},
			func(c Config) bool {
				return c.LeaseTTL == 5*time.Second && len(c.EtcdEndpoints) == 1 && c.EtcdEndpoints[0] == "x:1"
			}, ""},
		{"bad env value", nil, map[string]string{"CONSUMERD_ETCD_LEASE_TTL": "soon"}, nil, "CONSUMERD_ETCD_LEASE_TTL"},
		{"memory from env", nil, map[string]string{"CONSUMERD_ROCKSDB_MEMORY": "1.5GiB"}, func(c Config) bool {
			return c.RocksDBMemory == 3<<29
		}, ""},
		{"memory flag", []string{"--rocksdb.memory", "512MiB"}, nil, func(c Config) bool { return c.RocksDBMemory == 512<<20 }, ""},
		{"bad memory env", nil, map[string]string{"CONSUMERD_ROCKSDB_MEMORY": "lots"}, nil, `CONSUMERD_ROCKSDB_MEMORY="lots" (mirror of --rocksdb.memory): size "lots"`},
		{"namespace from env", nil, map[string]string{"CONSUMERD_WAL_NAMESPACE": "blue"}, func(c Config) bool {
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
		{[]string{"--member.load-interval", "-1s"}, "--member.load-interval: -1s must not be negative"},
		{[]string{"--member.load-interval", "0"}, ""},
		{[]string{"--placement", "random"}, `--placement: "random" must be 'load' or 'count'`},
		{[]string{"--placement", "count"}, ""},
		{[]string{"--http.addr", "8080"}, "--http.addr"},
		{[]string{"--http.advertise", "node7:8080"}, "--http.advertise"},
		{[]string{"--log.level", "loud"}, "--log.level"},
		{[]string{"--log.format", "xml"}, "--log.format"},
		{[]string{"--shutdown-timeout", "0s"}, "--shutdown-timeout"},
		{[]string{"--rocksdb.memory", "64MiB"}, ""},
		{[]string{"--rocksdb.memory", "63MiB"}, "--rocksdb.memory: 63MiB is below the minimum 64MiB"},
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

func TestReadiness(t *testing.T) {
	cases := []struct {
		name     string
		session  bool
		replicas []api.StatusReplica
		ready    bool
	}{
		{"no session", false, nil, false},
		{"idle member", true, nil, true},
		{"primary serving, standby backfilling", true, []api.StatusReplica{{Shard: "a", Slot: 0, State: "PRIMARY"}, {Shard: "b", Slot: 1, State: "BACKFILL"}}, true},
		{"primary still backfilling", true, []api.StatusReplica{{Shard: "a", Slot: 0, State: "BACKFILL"}}, false},
		{"failed standby", true, []api.StatusReplica{{Shard: "a", Slot: 1, State: "FAILED", Error: "x"}}, false},
	}
	for _, tc := range cases {
		if got, why := readiness(tc.session, tc.replicas); got != tc.ready || (!got && len(why) == 0) {
			t.Errorf("%s: ready=%v (%v), want %v", tc.name, got, why, tc.ready)
		}
	}
}
