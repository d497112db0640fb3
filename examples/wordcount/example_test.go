package wordcount_test

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
	"github.com/consumerd/consumerd/topic"
)

// firstWords is a user's own application: it counts lines of topic "lines"
// by their first word. Consume keeps the open transaction's counts in the
// shard cache; Flush writes them to the transaction, which consumerd
// commits with the read offsets, exactly once.
type firstWords struct{}

func (firstWords) Consume(s shard.Shard, env topic.Envelope, _ shard.Publisher) error {
	f := strings.Fields(string(env.Message.Payload))
	if len(f) == 0 {
		return nil
	}
	counts, _ := s.Cache().(map[string]int64)
	if counts == nil {
		counts = map[string]int64{}
		s.SetCache(counts)
	}
	if _, ok := counts[f[0]]; !ok {
		v, err := s.Get([]byte("w/" + f[0])) // the committed count (or the pending one)
		if err != nil {
			return err
		}
		var n int64
		if v != nil {
			if _, err := fmt.Sscan(string(v), &n); err != nil {
				return fmt.Errorf("stored count of %q: %w", f[0], err)
			}
		}
		counts[f[0]] = n
	}
	counts[f[0]]++
	return nil
}

func (firstWords) Flush(s shard.Shard, _ shard.Publisher) error {
	counts, _ := s.Cache().(map[string]int64)
	for w, n := range counts {
		s.Transaction().Put([]byte("w/"+w), []byte(fmt.Sprint(n)))
	}
	s.SetCache(nil)
	return nil
}

// firstWordsApp registers it. Its keys follow wordcount's layout ("w/<word>"
// → decimal), so wordcount's Query, Scan and Merge serve its queries.
func firstWordsApp() shard.App {
	return shard.App{
		Name: "firstwords", Topics: []string{"lines"},
		NewConsumer: func() shard.Consumer { return firstWords{} },
		Query:       wordcount.Query, Scan: wordcount.Scan, Merge: wordcount.Merge,
	}
}

// Example builds a daemon around a user's own Consumer. In a real binary
// that is the whole main:
//
//	func main() { os.Exit(daemon.Main(firstWordsApp(), wordcount.App())) }
//
// Here the same command line runs in-process: `serve` on the embedded
// default (its own etcd and nats-server on free ports; it creates the app's
// shards), then `publish` and `query`.
func Example() {
	apps := []shard.App{firstWordsApp(), wordcount.App()}
	dir, err := os.MkdirTemp("", "firstwords-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	etcd, peer, nats, httpAddr := "http://"+freeport.Addr(), "http://"+freeport.Addr(), freeport.Addr(), freeport.Addr()

	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan int)
	go func() {
		served <- daemon.Run(ctx, []string{"serve", "--app", "firstwords",
			"--data-dir", dir, "--http.addr", httpAddr, "--member.id", "example",
			"--embedded.etcd-client-url", etcd, "--embedded.etcd-peer-url", peer, "--embedded.nats-addr", nats,
		}, daemon.Options{Apps: apps, Stderr: io.Discard, Signals: make(chan os.Signal)})
	}()
	consumerd := func(stdin string, args ...string) (string, int) {
		var out bytes.Buffer
		args = append(args, "--etcd.endpoints", etcd, "--wal.url", "nats://"+nats)
		code := daemon.Run(ctx, args, daemon.Options{Apps: apps, Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: io.Discard})
		return out.String(), code
	}
	until := func(cond func() bool) {
		for deadline := time.Now().Add(60 * time.Second); !cond() && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
	}

	until(func() bool { _, code := consumerd("", "query", "--app", "firstwords", "--all"); return code == 0 })
	consumerd("the cat\nthe dog\na bird\nthe end\n", "publish", "--topic", "lines")
	var out string
	until(func() bool {
		out, _ = consumerd("", "query", "--app", "firstwords", "--all")
		return strings.Contains(out, "the 3")
	})
	fmt.Print(out)
	cancel()
	fmt.Println("serve exit code:", <-served)
	// Output:
	// a 1
	// the 3
	// serve exit code: 0
}
