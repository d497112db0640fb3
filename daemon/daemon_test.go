package daemon

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/daemon/internal/buildinfo"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/natsproc"
	"github.com/consumerd/consumerd/shard"
)

func TestMain(m *testing.M) {
	natsproc.Main(m, // removes the nats-server that natsproc.Binary built
		// nats.go v1.55.0 (object store, reconnects): this goroutine may start
		// after the connection closed and then waits on a nil channel forever
		// (third party; recoverylog/snapshot ignores it for the same reason).
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
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
		{[]string{"serve", "--rocksdb.memory", "12 apples"}, nil, `invalid argument "12 apples" for "--rocksdb.memory" flag: size "12 apples"`},
		{[]string{"serve"}, map[string]string{"CONSUMERD_ROCKSDB_MEMORY": "1MiB"}, "--rocksdb.memory: 1MiB is below the minimum 64MiB"},
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

// TestVersionFlag checks that `consumerd --version` prints this binary's
// build (in a test binary: "(devel)", no commit).
func TestVersionFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"--version"}, Options{Stdout: &out, Stderr: &errb}); code != 0 {
		t.Fatalf("--version: exit %d: %s", code, errb.String())
	}
	if want := "consumerd version " + buildinfo.Current.String() + "\n"; out.String() != want {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}
	if !strings.Contains(out.String(), runtime.Version()) {
		t.Errorf("--version %q lacks the Go version %s", out.String(), runtime.Version())
	}
}
