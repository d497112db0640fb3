package natstest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/internal/embednats"
	"github.com/consumerd/consumerd/internal/freeport"
)

// StartCluster starts n embedded nats-servers with clustered JetStream, each
// with its own client and route ports and t.TempDir() store, and waits (up to
// 30 s) until the cluster accepts a replicated stream. It returns the client
// URLs joined by commas, as nats.Connect and jetstream.Config.URL accept.
// Servers shut down via t.Cleanup.
func StartCluster(t testing.TB, n int) string {
	t.Helper()
	routePorts := make([]int, n)
	routes := make([]string, n)
	for i := range routePorts {
		routePorts[i] = freeport.Port(t)
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", routePorts[i])
	}
	name := fmt.Sprintf("natstest-%d", routePorts[0])
	urls := make([]string, n)
	for i := 0; i < n; i++ {
		s := StartServer(t, embednats.Config{
			ServerName:   fmt.Sprintf("%s-n%d", name, i),
			ReadyTimeout: 20 * time.Second,
			Cluster:      &embednats.Cluster{Name: name, Port: routePorts[i], Routes: routes},
		})
		urls[i] = s.URL()
	}
	url := strings.Join(urls, ",")
	waitJetStreamCluster(t, url, n)
	return url
}

// waitJetStreamCluster polls until a stream with n replicas can be created
// (meta leader elected, all peers known), then deletes it.
func waitJetStreamCluster(t testing.TB, url string, n int) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("natstest: connect %s: %v", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "natstest_ready", Subjects: []string{"natstest.ready"}, Replicas: n})
		if err == nil {
			err = js.DeleteStream(ctx, "natstest_ready")
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: JetStream cluster at %s not ready for R=%d streams in 30s: %v", url, n, err)
		}
		time.Sleep(100 * time.Millisecond) // poll interval while the meta group elects a leader
	}
}
