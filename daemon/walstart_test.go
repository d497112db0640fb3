package daemon

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/embednats"
	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/shard"
)

// startWaitingForWAL runs serve against a real etcd and a NATS URL where
// nothing listens yet, and waits until it logged two tries. It returns the
// NATS port, serve's HTTP base URL, its logs, the signal channel and its
// exit code's channel.
func startWaitingForWAL(t *testing.T) (port int, base string, logs *watchBuffer, sigs chan os.Signal, done chan int) {
	t.Helper()
	etcd := strings.Join(etcdtest.StartServer(t), ",")
	port = freeport.Port(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	logs, sigs, done = newWatchBuffer(), make(chan os.Signal, 2), make(chan int, 1)
	go func() { // owned by the test: ends with the signal sent below, or the test's end
		done <- Run(context.Background(), []string{"serve", "--etcd.endpoints", etcd, "--wal.url", fmt.Sprintf("nats://127.0.0.1:%d", port),
			"--data-dir", t.TempDir(), "--http.addr", addr, "--member.id", "m1", "--snapshot.store", "none"},
			Options{Apps: []shard.App{wordcount.App()}, Stderr: logs, Signals: sigs})
	}()
	t.Cleanup(func() {
		select {
		case sigs <- syscall.SIGTERM:
		default:
		}
		<-done
	})
	logs.waitFor(t, "serve to wait for NATS twice", func(s string) bool {
		return strings.Count(s, "waiting for NATS JetStream to answer") >= 2
	})
	return port, "http://" + addr, logs, sigs, done
}

// TestServeWaitsForTheWAL: a member started while its NATS is not up yet
// (the chaos harness restarted one while JetStream was electing) waits,
// saying so, and serves once NATS comes, instead of exiting 1 at once.
func TestServeWaitsForTheWAL(t *testing.T) {
	port, base, logs, sigs, done := startWaitingForWAL(t)
	ns, err := embednats.Start(embednats.Config{Port: port, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	logs.waitFor(t, "serve to serve", func(s string) bool { return strings.Contains(s, "serving") })
	resp, err := http.Get(base + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sigs <- syscall.SIGTERM // a lone member: exits at once
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d after NATS came; logs:\n%s", code, logs.String())
	}
	done <- 0 // for the cleanup
}

// TestServeStopsWhileWaitingForTheWAL: a signal while serve waits for NATS
// ends it at once, exit 0: nothing was started to drain.
func TestServeStopsWhileWaitingForTheWAL(t *testing.T) {
	_, _, logs, sigs, done := startWaitingForWAL(t)
	sigs <- syscall.SIGTERM
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d on a signal while waiting for NATS; logs:\n%s", code, logs.String())
	}
	done <- 0 // for the cleanup
	if !strings.Contains(logs.String(), "shutdown requested while starting") {
		t.Errorf("serve did not say why it stopped; logs:\n%s", logs.String())
	}
}

// TestServeWaitsForJetStreamQuorum: NATS answers but JetStream does not
// yet — one server of a three-node cluster is up, so it has no meta leader
// and JetStream requests time out (as in a chaos run's restart during an
// election). serve must wait, saying so, and serve once the other two join;
// a try's own timeout is not serve's context ending.
func TestServeWaitsForJetStreamQuorum(t *testing.T) {
	routes := []int{freeport.Port(t), freeport.Port(t), freeport.Port(t)}
	var routeURLs []string
	for _, p := range routes {
		routeURLs = append(routeURLs, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	node := func(i int) *embednats.Server {
		t.Helper()
		ns, err := embednats.Start(embednats.Config{StoreDir: t.TempDir(), ServerName: fmt.Sprintf("n%d", i),
			Cluster: &embednats.Cluster{Name: "c", Port: routes[i], Routes: routeURLs}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ns.Shutdown)
		return ns
	}
	first := node(0)
	etcd := strings.Join(etcdtest.StartServer(t), ",")
	addr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	logs, sigs, done := newWatchBuffer(), make(chan os.Signal, 2), make(chan int, 1)
	go func() { // owned by the test: ends with the signal sent below
		done <- Run(context.Background(), []string{"serve", "--etcd.endpoints", etcd, "--wal.url", first.URL(),
			"--data-dir", t.TempDir(), "--http.addr", addr, "--member.id", "m1", "--snapshot.store", "none"},
			Options{Apps: []shard.App{wordcount.App()}, Stderr: logs, Signals: sigs})
	}()
	defer func() {
		sigs <- syscall.SIGTERM
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d; logs:\n%s", code, logs.String())
		}
	}()
	logs.waitFor(t, "serve to wait for JetStream twice (or exit)", func(s string) bool {
		return strings.Count(s, "waiting for NATS JetStream to answer") >= 2 || len(done) > 0
	})
	if len(done) > 0 {
		code := <-done
		done <- code // for the deferred check
		t.Fatalf("serve exited %d while JetStream had no quorum; logs:\n%s", code, logs.String())
	}
	node(1)
	node(2)
	logs.waitFor(t, "serve to serve", func(s string) bool { return strings.Contains(s, "serving") })
}
