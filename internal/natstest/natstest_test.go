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
