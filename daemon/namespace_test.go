package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/internal/natsconn"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestMemberWithAnotherNamespaceIsRefused: the first member records the
// cluster's WAL namespace in etcd; a member of the same cluster (same
// --etcd.prefix) started with another --wal.namespace would use other
// streams, and is refused at once, naming both.
func TestMemberWithAnotherNamespaceIsRefused(t *testing.T) {
	c := newCLI(t)
	c.serve()
	waitfor.Until(t, time.Minute, "the first member to join (it records the namespace before)", func() (bool, string) {
		out, errs, _ := c.run("", "members", "list")
		return strings.Contains(out, "m1"), out + errs
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a bound, not a measurement
	defer cancel()
	var errb bytes.Buffer
	code := Run(ctx, []string{"serve", "--etcd.endpoints", c.etcd, "--wal.url", c.nats, "--wal.namespace", "blue",
		"--data-dir", t.TempDir(), "--http.addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--member.id", "m2", "--snapshot.store", "none"},
		Options{Apps: c.apps, Stderr: &errb, Signals: make(chan os.Signal)})
	want := `the cluster under --etcd.prefix /consumerd keeps its WAL in namespace "consumerd" (/consumerd/wal-namespace), but this member would use "blue": start it with --wal.namespace consumerd`
	if code != 1 || !strings.Contains(errb.String(), want) || ctx.Err() != nil {
		t.Fatalf("serve with another namespace: exit %d (context %v), stderr:\n%s\nwant exit 1 saying %q", code, ctx.Err(), errb.String(), want)
	}
	// Clients follow the recorded namespace; another one is refused.
	c.fails(2, `--wal.namespace "blue": the cluster under --etcd.prefix /consumerd keeps its WAL in namespace "consumerd"`, "", "topics", "list", "--wal.namespace", "blue")
}

// TestClientsFollowTheRecordedNamespace: a cluster whose members run with
// --wal.namespace blue; a client command without the flag writes to blue's
// streams, not to the prefix's default namespace.
func TestClientsFollowTheRecordedNamespace(t *testing.T) {
	c := newCLI(t)
	cli := etcdtest.NewClient(t, strings.Split(c.etcd, ","))
	if err := connect.ClaimNamespace(t.Context(), hclog.NewNullLogger(), cli, "/consumerd", "blue"); err != nil { // as serve --wal.namespace blue does
		t.Fatal(err)
	}
	c.ok("", "topics", "create", "--name", "t", "--partitions", "1")
	c.ok("x\n", "publish", "--topic", "t")
	for ns, want := range map[string]message.MessageID{"blue": 1, "consumerd": 0} {
		op, err := connect.OpenWAL(c.nats, ns, 1, 5*time.Second, natsconn.Security{}, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		w, err := op.Open(t.Context(), &wal.OpenOption{Channel: topic.ChannelName("t", 0)})
		if err != nil {
			t.Fatal(err)
		}
		last, err := w.LastID(t.Context())
		w.Close()
		op.Close()
		if err != nil || last != want {
			t.Fatalf("namespace %s: topic t holds up to id %d (%v), want %d", ns, last, err, want)
		}
	}
}

// TestClientsCreateStreamsWithTheRecordedReplicas: the first member records
// the cluster's --wal.replicas; a client command that creates a stream (a
// publish to a partition no member has opened) replicates it alike, and a
// member with another --wal.replicas is refused. Before, a publish ahead
// of the members created single-replica streams on a 3-node NATS cluster.
func TestClientsCreateStreamsWithTheRecordedReplicas(t *testing.T) {
	c := &harness{t: t, etcd: strings.Join(etcdtest.StartServer(t), ","), nats: natstest.StartCluster(t, 3), apps: []shard.App{wordcount.App()}}
	cli := etcdtest.NewClient(t, strings.Split(c.etcd, ","))
	if err := connect.ClaimReplicas(t.Context(), hclog.NewNullLogger(), cli, "/consumerd", 3); err != nil { // as serve --wal.replicas 3 does
		t.Fatal(err)
	}
	c.ok("", "topics", "create", "--name", "t", "--partitions", "1")
	c.ok("x\n", "publish", "--topic", "t")
	nc, err := nats.Connect(c.nats)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(t.Context(), "consumerd_t_s0000")
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().Config.Replicas; n != 3 {
		t.Fatalf("publish created topic t's stream with %d replicas, want the cluster's 3", n)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a bound, not a measurement
	defer cancel()
	var errb bytes.Buffer
	code := Run(ctx, []string{"serve", "--etcd.endpoints", c.etcd, "--wal.url", c.nats,
		"--data-dir", t.TempDir(), "--http.addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--member.id", "m2", "--snapshot.store", "none"},
		Options{Apps: c.apps, Stderr: &errb, Signals: make(chan os.Signal)})
	want := "creates its streams with 3 replicas (/consumerd/wal-replicas), but this member has --wal.replicas 1: start it with --wal.replicas 3"
	if code != 1 || !strings.Contains(errb.String(), want) {
		t.Fatalf("serve with another --wal.replicas: exit %d, stderr:\n%s\nwant exit 1 saying %q", code, errb.String(), want)
	}
}
