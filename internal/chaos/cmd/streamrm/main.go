// Command streamrm deletes the JetStream stream of one consumerd channel,
// as an operator's `nats stream rm` does: the chaos harness's
// stream-recreate fault runs it on the client host (no nats CLI there).
//
//	streamrm --url nats://a:4222,nats://b:4222 [--namespace consumerd] --channel lines/0002
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	wal "github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

func main() {
	url := flag.String("url", "", "NATS URLs, comma-separated")
	ns := flag.String("namespace", wal.DefaultNamespace, "the cluster's WAL namespace")
	channel := flag.String("channel", "", "the channel whose stream to delete, e.g. lines/0002")
	timeout := flag.Duration("timeout", 20*time.Second, "bound on the whole command")
	flag.Parse()
	if err := run(*url, *ns, *channel, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "streamrm:", err)
		os.Exit(1)
	}
}

func run(url, ns, channel string, timeout time.Duration) error {
	if url == "" || channel == "" {
		return fmt.Errorf("--url and --channel are required")
	}
	esc, err := wal.EscapeChannel(channel)
	if err != nil {
		return err
	}
	stream := ns + "_" + esc
	nc, err := nats.Connect(url, nats.Timeout(timeout))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := js.DeleteStream(ctx, stream); err != nil {
		return fmt.Errorf("delete stream %s (channel %s): %w", stream, channel, err)
	}
	fmt.Printf("deleted stream %s (channel %s)\n", stream, channel)
	return nil
}
