package nexmarkcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/consumerd/consumerd/daemon"
	"github.com/consumerd/consumerd/examples/nexmark"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/windows"
)

type checkFlags struct {
	queries     string
	timeout     time.Duration
	skipSources bool
}

func checkCommand() daemon.Command {
	var f checkFlags
	return daemon.Command{
		Use:   "check --query qN|all [--timeout D] [--skip-sources]",
		Short: "Compare queries' committed output with their models over the recorded run",
		Long: `check regenerates the recorded run's events (see generate) and, for each selected
query, waits until every partition of its output topic holds an end-of-input
mark from every one of its senders (the shards publishing there), reads each
partition on to its last message id at that time, then compares the rows there
(the payloads of the messages that are not marks) with the query's model, as
multisets: a row missing, extra or duplicated is a failure. It prints
"qN: exact: R rows equal the model" per query, or the difference and exits 1.
A row stored after a partition's end marks fails the check, naming the
partition and the row's message id. Output still incomplete after --timeout is
an error naming the partition, how many of its senders finished and the lowest
watermark heard.

It first checks that the source topics hold exactly the run's events, each
partition the events routed there in event order and then the end mark, each
payload equal to the regenerated one; a damaged input fails, naming the
partition and message id. --skip-sources skips that, for big runs.`,
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&f.queries, "query", "", "queries to check: all, or names separated by commas (required)")
			fs.DurationVar(&f.timeout, "timeout", 2*time.Minute, "how long to wait for the queries' output to complete")
			fs.BoolVar(&f.skipSources, "skip-sources", false, "do not verify the source topics' messages")
		},
		Check: func() error {
			if f.timeout <= 0 {
				return fmt.Errorf("--timeout: %s must be positive", f.timeout)
			}
			_, err := selectQueries("--query", f.queries)
			return err
		},
		Run: func(ctx context.Context, c *daemon.Client, stdout, _ io.Writer) error {
			qs, err := selectQueries("--query", f.queries)
			if err != nil {
				return err
			}
			return check(ctx, c, stdout, qs, f)
		},
	}
}

// checkModel is the model the checker compares with: Query.Model. A test
// replaces it to see that a wrong model fails the check.
var checkModel = func(q nexmark.Query, g nexmark.Generator, events uint64) []string { return q.Model(g.Events(events)) }

func check(ctx context.Context, c *daemon.Client, stdout io.Writer, qs []nexmark.Query, f checkFlags) error {
	rec, err := loadRun(ctx, c)
	if err != nil {
		return err
	}
	g := rec.generator()
	wctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	// Output first: once every output is complete, the end marks went
	// through every stage, so generate has finished and the sources are
	// complete too; checking them first could race a generate still
	// running.
	rows := make([][]string, len(qs))
	for i, q := range qs {
		if rows[i], err = followOutput(wctx, c, q); err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				return fmt.Errorf("%s: output incomplete after --timeout %s: %w", q.Name, f.timeout, err)
			}
			return fmt.Errorf("%s: %w", q.Name, err)
		}
	}
	if !f.skipSources {
		n, err := verifySources(ctx, c, rec)
		if err != nil {
			return fmt.Errorf("the source topics do not hold the recorded run (%s): %w", rec, err)
		}
		fmt.Fprintf(stdout, "sources: exact: %d events and %d end marks\n", rec.Events, n)
	}
	var differ []string
	for i, q := range qs {
		want := checkModel(q, g, rec.Events)
		if d := nexmark.Diff(rows[i], want); d != "" {
			fmt.Fprintf(stdout, "%s: differs from the model: %s\n", q.Name, d)
			differ = append(differ, q.Name)
			continue
		}
		note := ""
		if len(want) == 0 {
			note = " (the model has no rows over this run: it checks nothing)"
		}
		fmt.Fprintf(stdout, "%s: exact: %d rows equal the model%s\n", q.Name, len(want), note)
	}
	if len(differ) > 0 {
		return fmt.Errorf("%s: output differs from the model (see above)", strings.Join(differ, ", "))
	}
	return nil
}

// outputPartition is the end-of-input state of one output partition.
type outputPartition struct {
	part topic.Partition
	rows []string
	// senders is the senders' count (the marks' Senders; 0: no mark yet),
	// and wm each sender's largest mark.
	senders int
	wm      map[int]int64
	// ended is the id of the mark that completed the partition (0: not
	// complete yet), and late the rows stored after it.
	ended message.MessageID
	late  []message.ImmutableMessage
}

// finished counts the senders whose mark is at MaxTime.
func (o *outputPartition) finished() int {
	n := 0
	for _, t := range o.wm {
		if t == windows.MaxTime {
			n++
		}
	}
	return n
}

func (o *outputPartition) complete() bool { return o.senders > 0 && o.finished() == o.senders }

// progress says how far o got, for an incomplete output.
func (o *outputPartition) progress() string {
	if o.senders == 0 {
		return fmt.Sprintf("%s: no watermark mark yet (%d rows)", o.part, len(o.rows))
	}
	low, lowSender := int64(windows.MaxTime), -1
	for s := 0; s < o.senders; s++ {
		t, ok := o.wm[s]
		if !ok {
			return fmt.Sprintf("%s: %d of %d senders finished; sender %d sent no mark yet (%d rows)", o.part, o.finished(), o.senders, s, len(o.rows))
		}
		if t < low {
			low, lowSender = t, s
		}
	}
	return fmt.Sprintf("%s: %d of %d senders finished; lowest watermark %d (%s) from sender %d (%d rows)",
		o.part, o.finished(), o.senders, low, time.UnixMilli(low).UTC().Format(time.RFC3339Nano), lowSender, len(o.rows))
}

// observe takes one message of the partition; it returns ErrStopRead when
// the message completes the partition (every sender finished). A row after
// that goes to late.
func (o *outputPartition) observe(m message.ImmutableMessage) error {
	mk, isMark, err := windows.MarkOf(m)
	if err != nil {
		return fmt.Errorf("%s message id %d: %w", o.part, m.ID, err)
	}
	if !isMark {
		if o.ended != 0 {
			o.late = append(o.late, m)
		} else {
			o.rows = append(o.rows, string(m.Payload))
		}
		return nil
	}
	if o.senders != 0 && mk.Senders != o.senders {
		return fmt.Errorf("%s message id %d: mark %s says %d senders, earlier marks %d", o.part, m.ID, mk, mk.Senders, o.senders)
	}
	o.senders = mk.Senders
	if o.wm == nil {
		o.wm = map[int]int64{}
	}
	if t, ok := o.wm[mk.Sender]; !ok || mk.Time > t {
		o.wm[mk.Sender] = mk.Time
	}
	if o.ended == 0 && o.complete() {
		o.ended = m.ID
		return daemon.ErrStopRead
	}
	return nil
}

// readRest reads o's partition, complete, from the mark that completed it to
// its last message id now. Only marks may follow the end marks (a sender's
// end mark again, after a failover); a row there fails the check, naming
// the partition and the row's message id.
func (o *outputPartition) readRest(ctx context.Context, c *daemon.Client) error {
	head := o.ended
	err := c.ReadPartitionFrom(ctx, o.part, o.ended+1, func(m message.ImmutableMessage) error {
		head = m.ID
		return o.observe(m)
	})
	if err != nil {
		return fmt.Errorf("%s: reading after message id %d: %w", o.part, o.ended, err)
	}
	if len(o.late) == 0 {
		return nil
	}
	ids := make([]string, len(o.late))
	for i, m := range o.late {
		ids[i] = m.ID.String()
	}
	first := o.late[0]
	return fmt.Errorf("%s holds %d rows after the end marks of its %d senders (complete at message id %d, read to message id %d): message id %d, row %q (message ids %s)",
		o.part, len(o.late), o.senders, o.ended, head, first.ID, clip(string(first.Payload), 200), strings.Join(firstOf(ids, 5), ", "))
}

// clip cuts s to at most n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// followOutput follows every partition of q's output until each holds an end
// mark from every sender, then reads each on to its last message id, and
// returns the rows. A row after a partition's end marks is an error naming
// the partition and the row's message id. When ctx ends before every
// partition is complete, the error names every incomplete partition.
func followOutput(ctx context.Context, c *daemon.Client, q nexmark.Query) ([]string, error) {
	d, err := c.Topic(ctx, q.Output)
	if err != nil {
		return nil, fmt.Errorf("output topic: %w (run 'nexmark setup --queries %s')", err, q.Name)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var failed error // the first error but ctx ending; it ends the other reads
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if failed == nil {
			failed = err
			cancel()
		}
	}
	outs := make([]*outputPartition, d.Partitions)
	errs := make([]error, d.Partitions)
	var wg sync.WaitGroup
	for p := range outs {
		o := &outputPartition{part: topic.Partition{Topic: d.Name, Index: p}}
		outs[p] = o
		wg.Add(1)
		go func() { // ends with the reads: complete, failed, or ctx done
			defer wg.Done()
			err := c.FollowPartition(ctx, o.part, o.observe)
			switch {
			case err == nil: // complete
				if err := o.readRest(ctx, c); err != nil {
					fail(err) // even ctx ending: the rest is unchecked
				}
			case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
				errs[p] = err
			default:
				fail(err)
			}
		}()
	}
	wg.Wait()
	if failed != nil {
		return nil, failed
	}
	var incomplete []string
	var cause error
	for p, o := range outs {
		if !o.complete() {
			incomplete = append(incomplete, o.progress())
			cause = errs[p]
		}
	}
	if len(incomplete) > 0 {
		if cause == nil {
			cause = errors.New("follow ended early")
		}
		return nil, fmt.Errorf("%s: %w", strings.Join(incomplete, "; "), cause)
	}
	var rows []string
	for _, o := range outs {
		rows = append(rows, o.rows...)
	}
	return rows, nil
}

// sourceReader streams one source partition's messages to the comparison.
type sourceReader struct {
	part topic.Partition
	ch   chan message.ImmutableMessage
	err  error // valid once ch is closed
	// seen counts the messages compared.
	seen uint64
}

// next is the partition's next message; ok is false at its end (r.err says
// why it ended early).
func (r *sourceReader) next(ctx context.Context) (message.ImmutableMessage, bool, error) {
	select {
	case m, ok := <-r.ch:
		if !ok {
			return message.ImmutableMessage{}, false, r.err
		}
		r.seen++
		return m, true, nil
	case <-ctx.Done():
		return message.ImmutableMessage{}, false, ctx.Err()
	}
}

// verifySources checks that every source partition holds exactly the events
// of rec routed to it, in event order, then generate's end mark. The
// partitions are read concurrently and the events regenerated once, in
// order: each event is compared with the next message of its partition, so
// memory stays flat however long the run. It returns the number of end
// marks.
func verifySources(ctx context.Context, c *daemon.Client, rec runRecord) (int, error) {
	descs, err := sourceTopics(ctx, c)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	readers := map[topic.Partition]*sourceReader{}
	var order []*sourceReader
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel: the readers end with ctx
	for _, d := range descs {
		for p := 0; p < d.Partitions; p++ {
			r := &sourceReader{part: topic.Partition{Topic: d.Name, Index: p}, ch: make(chan message.ImmutableMessage, 256)}
			readers[r.part] = r
			order = append(order, r)
			wg.Add(1)
			go func() { // reads r.part to its head, or until ctx ends
				defer wg.Done()
				defer close(r.ch)
				r.err = c.ReadPartition(ctx, r.part, func(m message.ImmutableMessage) error {
					select {
					case r.ch <- m:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				})
			}()
		}
	}
	defer cancel() // runs before wg.Wait
	byTopic := map[string]topic.Description{}
	for _, d := range descs {
		byTopic[d.Name] = d
	}
	g := rec.generator()
	var ev nexmark.Event
	var want []byte
	for n := uint64(0); n < rec.Events; n++ {
		g.Event(n, &ev)
		d := byTopic[ev.Topic()]
		r := readers[topic.Partition{Topic: d.Name, Index: topic.PartitionFor(ev.Key(), d.Partitions)}]
		m, ok, err := r.next(ctx)
		if err != nil {
			return 0, fmt.Errorf("reading %s: %w", r.part, err)
		}
		if !ok {
			return 0, fmt.Errorf("%s holds %d messages, fewer than the events routed there: event %d is missing (did generate finish?)", r.part, r.seen, n)
		}
		want = ev.Append(want[:0])
		if err := sameEvent(&m, want); err != nil {
			return 0, fmt.Errorf("%s message id %d (its %d-th): want event %d, a %s at time %d: %w", r.part, m.ID, r.seen, n, ev.Kind, ev.Time(), err)
		}
		if m.Key != ev.Key() {
			return 0, fmt.Errorf("%s message id %d: event %d has key %q, want %q", r.part, m.ID, n, m.Key, ev.Key())
		}
	}
	for _, r := range order {
		m, ok, err := r.next(ctx)
		if err != nil {
			return 0, fmt.Errorf("reading %s: %w", r.part, err)
		}
		if !ok {
			return 0, fmt.Errorf("%s: no end mark after its %d events (did generate finish?)", r.part, r.seen)
		}
		if err := isEndMark(&m); err != nil {
			return 0, fmt.Errorf("%s message id %d: after the %d events routed there: %w", r.part, m.ID, r.seen-1, err)
		}
		var extra []string
		for {
			m, ok, err := r.next(ctx)
			if err != nil {
				return 0, fmt.Errorf("reading %s: %w", r.part, err)
			}
			if !ok {
				break
			}
			extra = append(extra, m.ID.String())
		}
		if len(extra) > 0 {
			return 0, fmt.Errorf("%s holds %d messages after its end mark (message ids %s): not the run's", r.part, len(extra), strings.Join(firstOf(extra, 5), ", "))
		}
	}
	return len(order), nil
}

func firstOf(ss []string, n int) []string {
	if len(ss) <= n {
		return ss
	}
	return append(ss[:n:n], fmt.Sprintf("… %d more", len(ss)-n))
}
