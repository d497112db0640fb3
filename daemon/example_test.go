package daemon_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/consumerd/consumerd/daemon"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/shard"
)

// A custom daemon is a main that registers its applications; it gets every
// consumerd subcommand (serve, shards, members, publish, query).
func Example_customDaemon() {
	main := func() {
		os.Exit(daemon.Main(wordcount.App() /*, myapp.App() */))
	}
	_ = main
}

// Run runs the same command line in-process. Here one member serves on the
// embedded default (its own etcd and nats-server, on free ports), creating
// the wordcount shards itself; lines are published and counted.
func ExampleRun() {
	apps := []shard.App{wordcount.App()}
	dir, err := os.MkdirTemp("", "consumerd-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	etcd, peer, nats, httpAddr := "http://"+freeport.Addr(), "http://"+freeport.Addr(), freeport.Addr(), freeport.Addr()

	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan int)
	go func() {
		served <- daemon.Run(ctx, []string{"serve",
			"--data-dir", dir, "--http.addr", httpAddr, "--member.id", "example",
			"--embedded.etcd-client-url", etcd, "--embedded.etcd-peer-url", peer, "--embedded.nats-addr", nats,
		}, daemon.Options{Apps: apps, Stderr: io.Discard, Signals: make(chan os.Signal)})
	}()

	// A client subcommand, run in-process.
	consumerd := func(stdin string, args ...string) (string, int) {
		var out bytes.Buffer
		args = append(args, "--etcd.endpoints", etcd, "--wal.url", "nats://"+nats)
		code := daemon.Run(ctx, args, daemon.Options{Apps: apps, Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: io.Discard})
		return out.String(), code
	}
	waitFor := func(cond func() bool) {
		for deadline := time.Now().Add(60 * time.Second); !cond() && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
		}
	}

	waitFor(func() bool { _, code := consumerd("", "query", "--app", "wordcount", "--all"); return code == 0 })
	consumerd("the cat\nthe dog\n", "publish", "--topic", "words")
	var counts string
	waitFor(func() bool {
		counts, _ = consumerd("", "query", "--app", "wordcount", "--all")
		return strings.Count(counts, "\n") == 3
	})
	fmt.Print(counts)

	cancel()
	fmt.Println("serve exit code:", <-served)
	// Output:
	// cat 1
	// dog 1
	// the 2
	// serve exit code: 0
}
