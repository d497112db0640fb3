package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/internal/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartGivesDistinctJetStreamServers(t *testing.T) {
	a, b := natstest.Start(t), natstest.Start(t)
	if a == b {
		t.Fatalf("two servers share URL %s", a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, url := range []string{a, b} {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatalf("connect %s: %v", url, err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		// A fresh server has JetStream enabled and no streams yet.
		info, err := js.AccountInfo(ctx)
		if err != nil {
			t.Fatalf("JetStream account info on %s: %v", url, err)
		}
		if info.Streams != 0 {
			t.Fatalf("fresh server %s has %d streams", url, info.Streams)
		}
		nc.Close()
	}
}

func TestStartClusterReplicatesStreams(t *testing.T) {
	url := natstest.StartCluster(t, 3)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "r3", []byte("x")); err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Cluster == nil || len(info.Cluster.Replicas) != 2 || info.State.Msgs != 1 {
		t.Fatalf("stream cluster info %+v, state %+v: want a leader and 2 replicas holding 1 message", info.Cluster, info.State)
	}
}
