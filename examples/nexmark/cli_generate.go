package nexmark

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/consumerd/consumerd/daemon"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/windows"
)

// generateInFlight bounds the appends awaiting their acknowledgement, as
// `consumerd publish` does: enough to keep NATS busy, few enough that a
// failure leaves little to sort out.
const generateInFlight = 1024

// progressEvery is how often generate reports progress on stderr.
const progressEvery = time.Second

type generateFlags struct {
	events uint64
	rate   float64
	seed   uint64
}

func generateCommand() daemon.Command {
	var f generateFlags
	return daemon.Command{
		Use:   "generate --events N [--rate R] [--seed S]",
		Short: "Publish a Nexmark run: events 0..N-1 to the source topics, then an end mark to every source partition",
		Long: `generate publishes the run's events to the source topics (run 'setup' first),
each keyed as its kind's topic says, as fast as NATS takes them; --rate spaces
their event times only (events per second of event time). When every event is
stored it sends an end-of-input watermark mark (windows.MaxTime) to every
source partition, which closes every window.

The run (events, rate, seed, base time) is recorded in etcd at
<prefix>/nexmark/run, for 'check'. A cluster holds one run: generate refuses
other parameters than the recorded ones. Re-running generate with the same
flags after a failure resumes it and stores nothing twice, also after
JetStream's duplicate window: what each partition already holds is skipped.`,
		Flags: func(fs *pflag.FlagSet) {
			fs.Uint64Var(&f.events, "events", 0, "number of events (required)")
			fs.Float64Var(&f.rate, "rate", DefaultRate, "events per second of event time")
			fs.Uint64Var(&f.seed, "seed", 1, "the generator's seed")
		},
		Check: func() error {
			if f.events < 1 {
				return errors.New("--events: give the number of events, at least 1")
			}
			if _, err := NewGenerator(f.seed, f.rate); err != nil {
				return fmt.Errorf("--rate: %w", err)
			}
			return nil
		},
		Run: func(ctx context.Context, c *daemon.Client, stdout, stderr io.Writer) error {
			rec := runRecord{Events: f.events, Rate: f.rate, Seed: f.seed, BaseTime: BaseTime}
			return generate(ctx, c, stdout, stderr, rec)
		},
	}
}

// genPartition is one source partition during generate.
type genPartition struct {
	part topic.Partition
	// stored is how many messages the partition held when generate
	// started, and last the last of them (nil when none).
	stored uint64
	last   *message.ImmutableMessage
	// routed counts the run's events routed here so far.
	routed uint64
}

// A resumed run skips, in each source partition, as many of the events
// routed there as the partition already holds. That is right because what a
// partition holds is a prefix of the events routed to it: generate appends
// from one goroutine, in event order, and the WAL stores the appends of one
// goroutine to one partition in call order; it stops issuing appends at the
// first failure, and the end mark is only sent once every event is stored.
// The one way to a gap is an append that failed transiently while a later
// one was stored (the WAL then reports the failure rather than store it out
// of order). So the prefix is checked where it is cheap: the last message
// a partition holds must be the event (or end mark) at its position, which
// a gap, a truncated head or a stranger's message shifts. check verifies
// every message.

func generate(ctx context.Context, c *daemon.Client, stdout, stderr io.Writer, rec runRecord) error {
	g := rec.generator()
	descs, err := sourceTopics(ctx, c) // first: a cluster not set up records no run
	if err != nil {
		return err
	}
	if err := recordRun(ctx, c, rec); err != nil {
		return err
	}
	parts := map[topic.Partition]*genPartition{}
	var order []*genPartition
	for _, d := range descs {
		for p := 0; p < d.Partitions; p++ {
			gp := &genPartition{part: topic.Partition{Topic: d.Name, Index: p}}
			if gp.stored, gp.last, err = storedState(ctx, c, gp.part); err != nil {
				return err
			}
			parts[gp.part] = gp
			order = append(order, gp)
		}
	}
	byTopic := map[string]topic.Description{}
	for _, d := range descs {
		byTopic[d.Name] = d
	}

	var (
		mu       sync.Mutex
		firstErr error
		acked    uint64
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return firstErr != nil
	}
	sem := make(chan struct{}, generateInFlight)
	start := time.Now()
	lastReport, lastAcked := start, uint64(0)
	var skipped, sent uint64
	var ev Event
	var scratch []byte
	for n := uint64(0); n < rec.Events && !failed(); n++ {
		g.Event(n, &ev)
		d := byTopic[ev.Topic()]
		key := ev.Key()
		gp := parts[topic.Partition{Topic: d.Name, Index: topic.PartitionFor(key, d.Partitions)}]
		i := gp.routed
		gp.routed++
		if i < gp.stored {
			if i == gp.stored-1 {
				scratch = ev.Append(scratch[:0])
				if err := sameEvent(gp.last, scratch); err != nil {
					fail(fmt.Errorf("resuming: %s holds %d messages but its last, message id %d, is not event %d of the run, the %d-th routed there: %w; the partition is not a prefix of the run: reset the cluster and generate again",
						gp.part, gp.stored, gp.last.ID, n, i+1, err))
					break
				}
			}
			skipped++
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			fail(ctx.Err())
		}
		if failed() {
			break
		}
		wg.Add(1)
		sent++
		msg := message.MutableMessage{Key: key, Payload: ev.Append(nil), DedupeID: fmt.Sprintf("nexmark/%d/%d", rec.Seed, n)}
		c.Publisher().PublishAsync(ctx, d, msg, func(p topic.Partition, _ message.MessageID, err error) {
			if err != nil {
				fail(fmt.Errorf("event %d (%s): %w", n, p, err))
			} else {
				mu.Lock()
				acked++
				mu.Unlock()
			}
			<-sem
			wg.Done()
		})
		if n%1024 == 0 {
			if now := time.Now(); now.Sub(lastReport) >= progressEvery {
				mu.Lock()
				a := acked
				mu.Unlock()
				fmt.Fprintf(stderr, "generate: %d of %d events, %.0f/s\n", skipped+a, rec.Events, float64(a-lastAcked)/now.Sub(lastReport).Seconds())
				lastReport, lastAcked = now, a
			}
		}
	}
	if !waitCtx(ctx, wg.Wait) {
		fail(fmt.Errorf("appends still unacknowledged: %w", ctx.Err()))
	}
	mu.Lock()
	err, done := firstErr, acked
	mu.Unlock()
	if err != nil {
		return fmt.Errorf("generate: %w (%d of %d events stored; re-run the same command to resume)", err, skipped+done, rec.Events)
	}

	// Every event is stored: end of input, to every source partition.
	marks := 0
	for _, gp := range order {
		switch {
		case gp.stored == gp.routed+1:
			if err := isEndMark(gp.last); err != nil {
				return fmt.Errorf("%s holds %d messages, one more than the run's %d events routed there, and its last (message id %d) is not the end mark: %w; reset the cluster and generate again",
					gp.part, gp.stored, gp.routed, gp.last.ID, err)
			}
			continue // sent by an earlier run
		case gp.stored > gp.routed+1:
			return fmt.Errorf("%s holds %d messages, more than the run's %d events routed there and its end mark: something else published there; reset the cluster and generate again",
				gp.part, gp.stored, gp.routed)
		}
		end := windows.Mark{Sender: 0, Senders: 1, Time: windows.MaxTime}.Message()
		end.DedupeID = fmt.Sprintf("nexmark/%d/end/%s", rec.Seed, gp.part.Channel())
		if _, err := c.Publisher().PublishTo(ctx, gp.part, end); err != nil {
			return fmt.Errorf("generate: every event is stored, but the end mark to %s failed: %w; re-run the same command to send it", gp.part, err)
		}
		marks++
	}
	took := time.Since(start)
	speed := ""
	if done > 0 {
		speed = fmt.Sprintf(", %.0f events/s", float64(done)/math.Max(took.Seconds(), 1e-3))
	}
	fmt.Fprintf(stdout, "generated %d events (%d published now, %d already stored; %d end marks sent, %d partitions) in %s%s\n",
		rec.Events, done, skipped, marks, len(order), took.Round(time.Millisecond), speed)
	return nil
}

// sameEvent checks that m is the event encoded as want.
func sameEvent(m *message.ImmutableMessage, want []byte) error {
	if _, isMark, _ := windows.MarkOf(*m); isMark {
		return errors.New("it is a watermark mark")
	}
	if !bytes.Equal(m.Payload, want) {
		var ev Event
		if err := ev.Decode(m.Payload); err != nil {
			return fmt.Errorf("its payload differs (%v)", err)
		}
		return fmt.Errorf("its payload differs (it is a %s at time %d)", ev.Kind, ev.Time())
	}
	return nil
}

// isEndMark checks that m is generate's end mark.
func isEndMark(m *message.ImmutableMessage) error {
	mk, ok, err := windows.MarkOf(*m)
	switch {
	case err != nil:
		return err
	case !ok:
		return errors.New("it is not a watermark mark")
	case mk.Time != windows.MaxTime:
		return fmt.Errorf("it is mark %s, not one at MaxTime", mk)
	}
	return nil
}

// storedState is how many messages part holds, and the last of them.
func storedState(ctx context.Context, c *daemon.Client, part topic.Partition) (uint64, *message.ImmutableMessage, error) {
	w, err := c.Opener().Open(ctx, &wal.OpenOption{Channel: part.Channel()})
	if err != nil {
		return 0, nil, fmt.Errorf("opening %s (NATS at %s): %w", part, c.WALURL(), err)
	}
	defer w.Close()
	head, err := w.LastID(ctx)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: reading its last message id: %w", part, err)
	}
	if head == 0 {
		return 0, nil, nil
	}
	var count uint64
	if counter, ok := w.(wal.Counter); ok {
		if count, err = counter.Count(ctx); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			return 0, nil, fmt.Errorf("%s: counting its messages: %w", part, err)
		}
	}
	if count == 0 { // a WAL that does not count: read them
		if err := c.ReadPartition(ctx, part, func(message.ImmutableMessage) error { count++; return nil }); err != nil {
			return 0, nil, err
		}
	}
	sc, err := w.Read(ctx, wal.ReadOption{Name: "nexmark-generate", DeliverPolicy: wal.DeliverStartFrom(head)})
	if err != nil {
		return 0, nil, fmt.Errorf("%s: reading its last message (id %d): %w", part, head, err)
	}
	defer sc.Close()
	select {
	case m, ok := <-sc.Chan():
		if !ok {
			<-sc.Done()
			return 0, nil, fmt.Errorf("%s: reading its last message (id %d): %w", part, head, sc.Error())
		}
		return count, &m, nil
	case <-ctx.Done():
		return 0, nil, fmt.Errorf("%s: reading its last message (id %d): %w", part, head, ctx.Err())
	}
}

// waitCtx calls wait and reports whether it returned before ctx ended. What
// wait still waits for then ends with the process (a command).
func waitCtx(ctx context.Context, wait func()) bool {
	done := make(chan struct{})
	go func() { // ends when wait returns
		wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
