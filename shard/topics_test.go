package shard

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/consumerd/consumerd/topic"
)

// TestEtcdTopicsTransient checks how EtcdTopics' errors stop a replica: a
// topic with no record and a record that does not decode need a person (not
// transient); etcd failing to answer is transient (the replica restarts).
func TestEtcdTopicsTransient(t *testing.T) {
	eps := etcdtest.StartServer(t)
	cli := etcdtest.NewClient(t, eps)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg := &topic.Registry{Client: cli, Prefix: "/r"}
	if _, err := reg.Create(ctx, topic.Description{Name: "words", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, topic.Key("/r", "typo"), `{"partition":3}`); err != nil {
		t.Fatal(err)
	}
	lookup := EtcdTopics(cli, "/r")
	if d, err := lookup(ctx, "words"); err != nil || d.Partitions != 3 {
		t.Fatalf("lookup(words) = %+v, %v", d, err)
	}
	for name, want := range map[string]error{"nope": topic.ErrUnknownTopic, "typo": topic.ErrBadRecord} {
		if _, err := lookup(ctx, name); !errors.Is(err, want) || isTransient(err) {
			t.Errorf("lookup(%s) = %v (transient %v), want %v, not transient", name, err, isTransient(err), want)
		}
	}

	closed, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := EtcdTopics(closed, "/r")(ctx, "words"); err == nil || !isTransient(err) {
		t.Errorf("lookup through a closed etcd client = %v, want a transient error", err)
	}
}
