package natsconn_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/internal/blackhole"
	"github.com/consumerd/consumerd/internal/natsconn"
	"github.com/consumerd/consumerd/internal/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLeavesASilentServer: a connection whose server goes silent (cut off
// by a partition, the TCP connection still open) moves to the next server
// of its URL list within a few ping intervals and works there. The chaos
// harness found a client command stuck on an isolated nats-server for the
// whole of its timeout: with nats.go's default pings it would have stayed
// for minutes.
func TestLeavesASilentServer(t *testing.T) {
	a, b := natstest.Start(t), natstest.Start(t)
	hole := blackhole.New(t, a[len("nats://"):])
	moved := make(chan string, 1)
	nc, err := nats.Connect("nats://"+hole.Addr()+","+b, natsconn.Options("test", 0, natsconn.Security{},
		nats.DontRandomize(),
		nats.ReconnectHandler(func(c *nats.Conn) { moved <- c.ConnectedUrl() }))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := nc.ConnectedUrl(); got != "nats://"+hole.Addr() {
		t.Fatalf("connected to %s first, want the proxy", got)
	}
	hole.Cut()
	bound := natsconn.PingInterval*time.Duration(natsconn.MaxPingsOut+2) + 5*time.Second
	select {
	case url := <-moved:
		if url != b {
			t.Fatalf("reconnected to %s, want %s", url, b)
		}
	case <-time.After(bound):
		t.Fatalf("still on the silent server after %s", bound)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("after moving: %v", err)
	}
}
