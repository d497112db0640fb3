package nexmarkcli

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
	"github.com/consumerd/consumerd/examples/nexmark"
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
			fs.Float64Var(&f.rate, "rate", nexmark.DefaultRate, "events per second of event time")
			fs.Uint64Var(&f.seed, "seed", 1, "the generator's seed")
		},
		Check: func() error {
			if f.events < 1 {
				return errors.New("--events: give the number of events, at least 1")
			}
			if _, err := nexmark.NewGenerator(f.seed, f.rate); err != nil {
				return fmt.Errorf("--rate: %w", err)
			}
			return nil
		},
		Run: func(ctx context.Context, c *daemon.Client, stdout, stderr io.Writer) error {
			rec := runRecord{Events: f.events, Rate: f.rate, Seed: f.seed, BaseTime: nexmark.BaseTime}
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

// generate publishes the run rec to c's source topics (resuming what an
// earlier generate of the same run stored), then the end mark to every
// source partition, and reports the outcome on stdout and its progress on
// stderr. It records rec in etcd first and refuses a different recorded run.
func generate(ctx context.Context, c *daemon.Client, stdout, stderr io.Writer, rec runRecord) error {
	descs, err := sourceTopics(ctx, c) // first: a cluster not set up records no run
	if err != nil {
		return err
	}
	if err := recordRun(ctx, c, rec); err != nil {
		return err
	}
	src, err := loadSources(ctx, c, descs)
	if err != nil {
		return err
	}
	start := time.Now()
	skipped, done, err := publishEvents(ctx, c, stderr, rec, src)
	if err != nil {
		return fmt.Errorf("generate: %w (%d of %d events stored; re-run the same command to resume)", err, skipped+done, rec.Events)
	}
	marks, err := sendEndMarks(ctx, c, rec, src.order)
	if err != nil {
		return err
	}
	took := time.Since(start)
	speed := ""
	if done > 0 {
		speed = fmt.Sprintf(", %.0f events/s", float64(done)/math.Max(took.Seconds(), 1e-3))
	}
	fmt.Fprintf(stdout, "generated %d events (%d published now, %d already stored; %d end marks sent, %d partitions) in %s%s\n",
		rec.Events, done, skipped, marks, len(src.order), took.Round(time.Millisecond), speed)
	return nil
}

// genSources is the run's source partitions, each with what it held when
// generate started.
type genSources struct {
	byTopic map[string]topic.Description
	parts   map[topic.Partition]*genPartition
	// order is every partition, by topic (as descs lists them) then index.
	order []*genPartition
}

// loadSources reads, for every partition of descs, how many messages it
// holds and its last one.
func loadSources(ctx context.Context, c *daemon.Client, descs []topic.Description) (*genSources, error) {
	src := &genSources{byTopic: map[string]topic.Description{}, parts: map[topic.Partition]*genPartition{}}
	for _, d := range descs {
		src.byTopic[d.Name] = d
		for p := 0; p < d.Partitions; p++ {
			gp := &genPartition{part: topic.Partition{Topic: d.Name, Index: p}}
			var err error
			if gp.stored, gp.last, err = storedState(ctx, c, gp.part); err != nil {
				return nil, err
			}
			src.parts[gp.part] = gp
			src.order = append(src.order, gp)
		}
	}
	return src, nil
}

// route is the topic and partition ev goes to, as its key routes it.
func (s *genSources) route(ev *nexmark.Event, key string) (topic.Description, *genPartition) {
	d := s.byTopic[ev.Topic()]
	return d, s.parts[topic.Partition{Topic: d.Name, Index: topic.PartitionFor(key, d.Partitions)}]
}

// genAppends tracks generate's asynchronous appends: at most
// generateInFlight awaiting their acknowledgement, how many were
// acknowledged, and the first failure. Its methods are safe for the
// publisher's callbacks.
type genAppends struct {
	sem chan struct{}
	wg  sync.WaitGroup

	mu       sync.Mutex
	firstErr error
	acked    uint64
}

func newGenAppends() *genAppends {
	return &genAppends{sem: make(chan struct{}, generateInFlight)}
}

// fail records err unless a failure is recorded already.
func (a *genAppends) fail(err error) {
	a.mu.Lock()
	if a.firstErr == nil {
		a.firstErr = err
	}
	a.mu.Unlock()
}

// failed reports whether a failure is recorded.
func (a *genAppends) failed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.firstErr != nil
}

// state is the appends acknowledged and the first failure (nil when none).
func (a *genAppends) state() (uint64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.acked, a.firstErr
}

// acquire takes an in-flight slot, or records ctx's error and reports false
// when ctx ends first or a failure is recorded already.
func (a *genAppends) acquire(ctx context.Context) bool {
	select {
	case a.sem <- struct{}{}:
	case <-ctx.Done():
		a.fail(ctx.Err())
	}
	return !a.failed()
}

// publish appends msg to d asynchronously in a slot acquire took; the
// callback records the outcome of event n and frees the slot.
func (a *genAppends) publish(ctx context.Context, c *daemon.Client, d topic.Description, msg message.MutableMessage, n uint64) {
	a.wg.Add(1)
	c.Publisher().PublishAsync(ctx, d, msg, func(p topic.Partition, _ message.MessageID, err error) {
		if err != nil {
			a.fail(fmt.Errorf("event %d (%s): %w", n, p, err))
		} else {
			a.mu.Lock()
			a.acked++
			a.mu.Unlock()
		}
		<-a.sem
		a.wg.Done()
	})
}

// genProgress reports generate's progress on stderr at most every
// progressEvery.
type genProgress struct {
	stderr     io.Writer
	events     uint64
	lastReport time.Time
	lastAcked  uint64
}

// report prints the events stored so far (skipped+acked) and the rate of
// acknowledgements since the last report, if progressEvery has passed.
func (p *genProgress) report(skipped, acked uint64) {
	now := time.Now()
	if now.Sub(p.lastReport) < progressEvery {
		return
	}
	fmt.Fprintf(p.stderr, "generate: %d of %d events, %.0f/s\n", skipped+acked, p.events, float64(acked-p.lastAcked)/now.Sub(p.lastReport).Seconds())
	p.lastReport, p.lastAcked = now, acked
}

// publishEvents publishes the run's events 0..rec.Events-1 in order, each
// to the partition its key routes it to, skipping in each partition the
// events it already holds (see the comment on resuming above generate). It stops
// issuing appends at the first failure and returns once every issued
// append is acknowledged or ctx ends: the events skipped, the appends
// acknowledged, and the first failure.
func publishEvents(ctx context.Context, c *daemon.Client, stderr io.Writer, rec runRecord, src *genSources) (skipped, acked uint64, err error) {
	g := rec.generator()
	apps := newGenAppends()
	progress := genProgress{stderr: stderr, events: rec.Events, lastReport: time.Now()}
	var ev nexmark.Event
	var scratch []byte
	for n := uint64(0); n < rec.Events && !apps.failed(); n++ {
		g.Event(n, &ev)
		key := ev.Key()
		d, gp := src.route(&ev, key)
		i := gp.routed
		gp.routed++
		if i < gp.stored {
			if i == gp.stored-1 {
				scratch = ev.Append(scratch[:0])
				if err := sameEvent(gp.last, scratch); err != nil {
					apps.fail(fmt.Errorf("resuming: %s holds %d messages but its last, message id %d, is not event %d of the run, the %d-th routed there: %w; the partition is not a prefix of the run: reset the cluster and generate again",
						gp.part, gp.stored, gp.last.ID, n, i+1, err))
					break
				}
			}
			skipped++
			continue
		}
		if !apps.acquire(ctx) {
			break
		}
		msg := message.MutableMessage{Key: key, Payload: ev.Append(nil), DedupeID: fmt.Sprintf("nexmark/%d/%d", rec.Seed, n)}
		apps.publish(ctx, c, d, msg, n)
		if n%1024 == 0 {
			a, _ := apps.state()
			progress.report(skipped, a)
		}
	}
	if !waitCtx(ctx, apps.wg.Wait) {
		apps.fail(fmt.Errorf("appends still unacknowledged: %w", ctx.Err()))
	}
	acked, err = apps.state()
	return skipped, acked, err
}

// sendEndMarks sends the end-of-input mark to every partition of order
// that does not hold it yet, once every event is stored, and returns how
// many it sent. A partition holding more than its events and end mark, or
// a last message after its events that is not the end mark, is an error:
// something else published there.
func sendEndMarks(ctx context.Context, c *daemon.Client, rec runRecord, order []*genPartition) (int, error) {
	marks := 0
	for _, gp := range order {
		switch {
		case gp.stored == gp.routed+1:
			if err := isEndMark(gp.last); err != nil {
				return marks, fmt.Errorf("%s holds %d messages, one more than the run's %d events routed there, and its last (message id %d) is not the end mark: %w; reset the cluster and generate again",
					gp.part, gp.stored, gp.routed, gp.last.ID, err)
			}
			continue // sent by an earlier run
		case gp.stored > gp.routed+1:
			return marks, fmt.Errorf("%s holds %d messages, more than the run's %d events routed there and its end mark: something else published there; reset the cluster and generate again",
				gp.part, gp.stored, gp.routed)
		}
		end := windows.Mark{Sender: 0, Senders: 1, Time: windows.MaxTime}.Message()
		end.DedupeID = fmt.Sprintf("nexmark/%d/end/%s", rec.Seed, gp.part.Channel())
		if _, err := c.Publisher().PublishTo(ctx, gp.part, end); err != nil {
			return marks, fmt.Errorf("generate: every event is stored, but the end mark to %s failed: %w; re-run the same command to send it", gp.part, err)
		}
		marks++
	}
	return marks, nil
}

// sameEvent checks that m is the event encoded as want.
func sameEvent(m *message.ImmutableMessage, want []byte) error {
	if _, isMark, _ := windows.MarkOf(*m); isMark {
		return errors.New("it is a watermark mark")
	}
	if !bytes.Equal(m.Payload, want) {
		var ev nexmark.Event
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
