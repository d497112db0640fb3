package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// load publishes corpus lines to a topic of the cluster from this process,
// in-process (one NATS connection, asynchronous appends), at a fixed rate
// until stop, and keeps the token counts of every acknowledged line: the
// oracle wordcount's counts must equal.
type load struct {
	rate   int // lines a second
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine, its appends and connection are done

	mu     sync.Mutex
	counts map[string]int
	acked  int
	err    error // the first failed append
}

// loadTick is how often the publisher catches up with its schedule.
const loadTick = 10 * time.Millisecond

// loadInFlight bounds the appends awaiting acknowledgement: a publisher
// this far behind is not keeping the rate, which stop reports.
const loadInFlight = 4096

// startLoad starts publishing rate lines a second to topic tp (partitions
// partitions, as created) of c; stop ends it. Each line goes to the
// partition of its sequence number's key, with a dedupe id, so an append the
// WAL retries is stored once.
func startLoad(tb testing.TB, c *cluster, tp string, partitions, rate int) *load {
	return startLoadRouted(tb, c, tp, partitions, rate, func(n int) (string, int) { return fmt.Sprint(n), -1 })
}

// startLoadRouted is startLoad with line n keyed by route(n), which also
// names the partition the key must land on (-1: any); a line that lands
// elsewhere fails the load.
func startLoadRouted(tb testing.TB, c *cluster, tp string, partitions, rate int, route func(n int) (key string, want int)) *load {
	tb.Helper()
	op := clusterWAL(tb, c)
	pub := topic.NewPublisher(op, nil)
	lines, _ := corpus(50_000) // cycled; the oracle counts what was acknowledged
	desc := topic.Description{Name: tp, Partitions: partitions}
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{rate: rate, cancel: cancel, done: make(chan struct{}), counts: map[string]int{}}
	go func() { // owned by l: ends with stop, after its appends and connection
		defer close(l.done)
		defer op.Close()
		defer pub.Close()
		var inflight sync.WaitGroup
		defer inflight.Wait()
		sem := make(chan struct{}, loadInFlight)
		// Appends outlive the cancel: stop ends the schedule, not the
		// appends already sent (their acknowledgements count).
		actx := context.WithoutCancel(ctx)
		t := time.NewTicker(loadTick)
		defer t.Stop()
		start, seq := time.Now(), 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for due := int(time.Since(start).Seconds() * float64(rate)); seq < due; seq++ {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					return
				}
				line, n := lines[seq%len(lines)], seq
				key, want := route(n)
				inflight.Add(1)
				msg := message.MutableMessage{Key: key, Payload: []byte(line), DedupeID: fmt.Sprintf("bench-load/%s/%d", tp, n)}
				pub.PublishAsync(actx, desc, msg, func(part topic.Partition, _ message.MessageID, err error) {
					defer inflight.Done()
					defer func() { <-sem }()
					l.mu.Lock()
					defer l.mu.Unlock()
					if err == nil && want >= 0 && part.Index != want {
						err = fmt.Errorf("key %q went to partition %d, not %d", key, part.Index, want)
					}
					if err != nil {
						if l.err == nil {
							l.err = fmt.Errorf("load: line %d to topic %s: %w", n, tp, err)
						}
						return
					}
					l.acked++
					for _, tok := range strings.Fields(line) {
						l.counts[tok]++
					}
				})
			}
		}
	}()
	tb.Cleanup(func() { l.stop() }) // a failed benchmark still leaves no goroutine behind
	return l
}

// clusterWAL connects to c's WAL in-process, in the namespace its members
// use; the caller closes it.
func clusterWAL(tb testing.TB, c *cluster) wal.Opener {
	tb.Helper()
	ns, err := jetstream.NamespaceOf("/consumerd") // the members' default etcd prefix
	if err != nil {
		tb.Fatal(err)
	}
	op, err := wal.NewOpenerBuilder(jetstream.NewBuilder(jetstream.Config{URL: c.natsURL, Namespace: ns, Replicas: 1})).Build()
	if err != nil {
		tb.Fatalf("opening the WAL at %s: %v", c.natsURL, err)
	}
	return op
}

// stop ends publishing, waits for the appends in flight and the connection
// to close, and returns the lines acknowledged and their token counts; it
// fails when an append failed. Safe to call more than once.
func (l *load) stop() (int, map[string]int, error) {
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked, l.counts, l.err
}
