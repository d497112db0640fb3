package nexmarkcli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/daemon"
	"github.com/consumerd/consumerd/examples/nexmark"
	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/windows"
)

// cliEnv runs the nexmark commands in-process against one embedded etcd
// and NATS (no members: the tests write query output themselves).
type cliEnv struct {
	t          *testing.T
	etcd, nats string
}

func newCliEnv(t *testing.T) *cliEnv {
	t.Helper()
	return &cliEnv{t: t, etcd: strings.Join(etcdtest.StartServer(t), ","), nats: natstest.Start(t)}
}

// run runs args with extra test commands; it returns stdout, stderr and
// the exit code.
func (e *cliEnv) run(extra []daemon.Command, args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	args = append(args, "--etcd.endpoints", e.etcd, "--wal.url", e.nats)
	code := daemon.Run(e.t.Context(), args, daemon.Options{Name: "nexmark", Apps: nexmark.Apps(), Commands: append(Commands(), extra...), Stdout: &out, Stderr: &errb})
	return out.String(), errb.String(), code
}

func (e *cliEnv) ok(args ...string) string {
	e.t.Helper()
	out, errs, code := e.run(nil, args...)
	if code != 0 {
		e.t.Fatalf("%v: exit %d: %s%s", args, code, out, errs)
	}
	return out
}

// fails runs args and fails the test unless they exit code with want in
// stdout or stderr.
func (e *cliEnv) fails(code int, want string, args ...string) string {
	e.t.Helper()
	out, errs, got := e.run(nil, args...)
	if got != code || !strings.Contains(out+errs, want) {
		e.t.Fatalf("%v: exit %d, stdout %q, stderr %q; want exit %d saying %q", args, got, out, errs, code, want)
	}
	return out + errs
}

// with runs fn connected, as a Command does.
func (e *cliEnv) with(fn func(ctx context.Context, c *daemon.Client) error) {
	e.t.Helper()
	cmd := daemon.Command{Use: "test-with", Run: func(ctx context.Context, c *daemon.Client, _, _ io.Writer) error { return fn(ctx, c) }}
	if out, errs, code := e.run([]daemon.Command{cmd}, "test-with"); code != 0 {
		e.t.Fatalf("test-with: exit %d: %s%s", code, out, errs)
	}
}

// counts is the number of messages per source partition.
func (e *cliEnv) counts() map[topic.Partition]uint64 {
	out := map[topic.Partition]uint64{}
	e.with(func(ctx context.Context, c *daemon.Client) error {
		ds, err := sourceTopics(ctx, c)
		if err != nil {
			return err
		}
		for _, d := range ds {
			for p := 0; p < d.Partitions; p++ {
				part := topic.Partition{Topic: d.Name, Index: p}
				n, _, err := storedState(ctx, c, part)
				if err != nil {
					return err
				}
				out[part] = n
			}
		}
		return nil
	})
	return out
}

func total(m map[topic.Partition]uint64) (n uint64) {
	for _, v := range m {
		n += v
	}
	return n
}

func TestCliSetup(t *testing.T) {
	e := newCliEnv(t)
	out := e.ok("setup", "--partitions", "2", "--queries", "q0,q2", "--standbys", "1")
	if !strings.Contains(out, "setup q0,q2: topics 5 created") || !strings.Contains(out, "shards 4 created, 0 updated, 0 unchanged") {
		t.Fatalf("setup: %q", out)
	}
	if out := e.ok("setup", "--partitions", "2", "--queries", "q0,q2", "--standbys", "1"); !strings.Contains(out, "topics 0 created, 5 unchanged; shards 0 created, 0 updated, 4 unchanged") {
		t.Fatalf("setup again: %q, want nothing changed", out)
	}
	e.fails(1, "topic nexmark-person exists with 2 partitions; refusing 3", "setup", "--partitions", "3", "--queries", "q0")
	e.fails(2, `--queries: unknown query "q99" (this binary has: q0,`, "setup", "--queries", "q0,q99")
	e.fails(2, "--partitions: 0 must be in 1..", "setup", "--partitions", "0")
	e.fails(2, "--standbys: -1 must be in 0..", "setup", "--standbys", "-1")
	// Every query, later: the ones set up stay, the others are added.
	if out := e.ok("setup", "--partitions", "2"); !strings.Contains(out, "shards") || strings.Contains(out, "shards 0 created") {
		t.Fatalf("setup of every query: %q", out)
	}
	if out := e.ok("shards", "list"); !strings.Contains(out, "q0-0001") || !strings.Contains(out, "q5-0000") {
		t.Fatalf("shards list:\n%s", out)
	}
}

func TestCliGenerate(t *testing.T) {
	e := newCliEnv(t)
	e.fails(1, "source topic nexmark-person", "generate", "--events", "10")
	e.ok("setup", "--partitions", "2", "--queries", "q0")
	e.fails(2, "--events: give the number of events", "generate")
	e.fails(2, "--rate: rate 0: must be a positive", "generate", "--events", "5", "--rate", "0")
	out := e.ok("generate", "--events", "10")
	if !strings.Contains(out, "generated 10 events (10 published now, 0 already stored; 6 end marks sent, 6 partitions)") {
		t.Fatalf("generate: %q", out)
	}
	e.fails(1, "this cluster already holds a run with other parameters (--events 10 --rate 100000 --seed 1 (base time 1436918400000), at /consumerd/nexmark/run); this one is --events 11", "generate", "--events", "11")
	c := e.counts()
	if total(c) != 10+6 {
		t.Fatalf("stored %v: want 10 events and 6 end marks", c)
	}
	// Re-running stores nothing more.
	if out := e.ok("generate", "--events", "10"); !strings.Contains(out, "(0 published now, 10 already stored; 0 end marks sent, 6 partitions)") {
		t.Fatalf("generate again: %q", out)
	}
	if got := e.counts(); total(got) != 16 {
		t.Fatalf("after re-running: %v", got)
	}
	e.with(func(ctx context.Context, c *daemon.Client) error {
		rec, err := loadRun(ctx, c)
		if err != nil {
			return err
		}
		_, err = verifySources(ctx, c, rec)
		return err
	})
}

// TestCliGenerateResume: a generate that stopped part-way is resumed by
// re-running it, storing nothing twice even when the dedupe ids no longer
// help (the JetStream duplicate window passed): the prefix already stored
// is skipped. The earlier run is played by publishing a prefix of each
// partition's events with other dedupe ids.
func TestCliGenerateResume(t *testing.T) {
	const events = 3000
	for _, tc := range []struct {
		name string
		// keep says whether event n, the i-th of its partition, was stored
		// by the earlier run.
		keep    func(n, i uint64) bool
		wantErr string
	}{
		{"prefix", func(n, i uint64) bool { return n < events/2 }, ""},
		{"uneven prefix", func(n, i uint64) bool { return i < n%7*10 || n < 100 }, ""},
		{"gap", func(n, i uint64) bool { return n < events/2 && n != 700 }, "is not a prefix of the run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newCliEnv(t)
			e.ok("setup", "--partitions", "2", "--queries", "q0")
			rec := runRecord{Events: events, Rate: 1000, Seed: 7, BaseTime: nexmark.BaseTime}
			e.with(func(ctx context.Context, c *daemon.Client) error {
				if err := recordRun(ctx, c, rec); err != nil {
					return err
				}
				descs, err := sourceTopics(ctx, c)
				if err != nil {
					return err
				}
				byTopic := map[string]topic.Description{}
				for _, d := range descs {
					byTopic[d.Name] = d
				}
				routed := map[topic.Partition]uint64{}
				stopped := map[topic.Partition]bool{}
				var ev nexmark.Event
				g := rec.generator()
				for n := uint64(0); n < events; n++ {
					g.Event(n, &ev)
					d := byTopic[ev.Topic()]
					part := topic.Partition{Topic: d.Name, Index: topic.PartitionFor(ev.Key(), d.Partitions)}
					i := routed[part]
					routed[part]++
					if stopped[part] {
						continue
					}
					if !tc.keep(n, i) {
						if tc.name != "gap" {
							stopped[part] = true // a prefix: nothing later
						}
						continue
					}
					msg := message.MutableMessage{Key: ev.Key(), Payload: ev.Append(nil), DedupeID: fmt.Sprintf("earlier/%d", n)}
					if _, err := c.Publisher().PublishTo(ctx, part, msg); err != nil {
						return err
					}
				}
				return nil
			})
			before := total(e.counts())
			args := []string{"generate", "--events", fmt.Sprint(events), "--rate", "1000", "--seed", "7"}
			if tc.wantErr != "" {
				e.fails(1, tc.wantErr, args...)
				return
			}
			out := e.ok(args...)
			if want := fmt.Sprintf("(%d published now, %d already stored; 6 end marks sent", events-before, before); !strings.Contains(out, want) {
				t.Fatalf("resumed generate: %q, want %q", out, want)
			}
			if got := total(e.counts()); got != events+6 {
				t.Fatalf("%d messages stored, want %d events and 6 end marks", got, events)
			}
			e.with(func(ctx context.Context, c *daemon.Client) error {
				_, err := verifySources(ctx, c, rec)
				return err
			})
		})
	}
}

// TestCliCheck plays the members: it writes q0's output as the model says
// (or not), with end marks from each sender, and check compares.
func TestCliCheck(t *testing.T) {
	e := newCliEnv(t)
	e.ok("setup", "--partitions", "2", "--queries", "q0,q2")
	e.fails(2, "--query: give all or query names", "check")
	e.fails(1, "no nexmark run recorded at /consumerd/nexmark/run (under --etcd.prefix /consumerd): run 'nexmark generate' first", "check", "--query", "q0")
	e.ok("generate", "--events", "500", "--rate", "1000")
	e.fails(1, "q0: output incomplete after --timeout 300ms: nexmark-q0/0000: no watermark mark yet (0 rows)", "check", "--query", "q0", "--timeout", "300ms")

	q0, _ := nexmark.Lookup("q0")
	g, _ := nexmark.NewGenerator(1, 1000)
	model := q0.Model(g.Events(500))
	publish := func(rows []string, marks []windows.Mark) { publishTo(e, q0.Output, rows, marks) }
	publish(model[:len(model)-1], []windows.Mark{{Sender: 0, Senders: 2, Time: windows.MaxTime}, {Sender: 1, Senders: 2, Time: 1436918405000}})
	e.fails(1, "nexmark-q0/0000: 1 of 2 senders finished; lowest watermark 1436918405000 (2015-07-15T00:00:05Z) from sender 1", "check", "--query", "q0", "--timeout", "300ms")

	// The last sender finishes, one row short: the check fails naming it.
	publish(nil, []windows.Mark{{Sender: 1, Senders: 2, Time: windows.MaxTime}})
	out := e.fails(1, fmt.Sprintf("q0: differs from the model: %d rows, model %d: 1 missing, 0 extra", len(model)-1, len(model)), "check", "--query", "q0")
	if !strings.Contains(out, "missing: ") || !strings.Contains(out, "nexmark: q0: output differs from the model") {
		t.Fatalf("check of a short output: %s", out)
	}

	// The missing row, stored after the end marks: the check reads every
	// partition to its last message id and fails naming the partition, the
	// row and its message id, rather than stopping at the end marks (and
	// reporting the row missing) or counting it (and the output exact).
	// Partition 0 holds the even rows of model[:len(model)-1], then 3 marks.
	publish(model[len(model)-1:], nil)
	complete := len(model)/2 + 3
	out = e.fails(1, fmt.Sprintf("nexmark: q0: nexmark-q0/0000 holds 1 rows after the end marks of its 2 senders (complete at message id %d, read to message id %d): message id %d, row %q (message ids %d)",
		complete, complete+1, complete+1, model[len(model)-1], complete+1), "check", "--query", "q0")
	if strings.Contains(out, "differs from the model") || strings.Contains(out, "exact") {
		t.Fatalf("check of a row after the end marks compared the output: %s", out)
	}

	// q2's output exactly as the model says: exact, sources verified.
	q2, _ := nexmark.Lookup("q2")
	publishTo(e, q2.Output, q2.Model(g.Events(500)), []windows.Mark{{Sender: 0, Senders: 1, Time: windows.MaxTime}})
	out = e.ok("check", "--query", "q2")
	if !strings.Contains(out, "sources: exact: 500 events and 6 end marks") || !strings.Contains(out, fmt.Sprintf("q2: exact: %d rows equal the model", len(q2.Model(g.Events(500))))) {
		t.Fatalf("check q2: %q", out)
	}

	// A damaged input fails loudly, naming partition and message id; with
	// --skip-sources the output alone is compared.
	e.with(func(ctx context.Context, c *daemon.Client) error {
		_, err := c.Publisher().PublishTo(ctx, topic.Partition{Topic: nexmark.TopicBid, Index: 1}, message.MutableMessage{Key: "x", Payload: []byte("stranger")})
		return err
	})
	e.fails(1, "the source topics do not hold the recorded run (--events 500 --rate 1000 --seed 1 (base time 1436918400000)): nexmark-bid/0001 holds 1 messages after its end mark (message ids ", "check", "--query", "q2")
	e.ok("check", "--query", "q2", "--skip-sources")
}

// publishTo writes rows to topic name (two partitions), round robin, then
// each mark to both partitions.
func publishTo(e *cliEnv, name string, rows []string, marks []windows.Mark) {
	e.t.Helper()
	e.with(func(ctx context.Context, c *daemon.Client) error {
		for i, r := range rows {
			part := topic.Partition{Topic: name, Index: i % 2}
			if _, err := c.Publisher().PublishTo(ctx, part, message.MutableMessage{Key: fmt.Sprint(i), Payload: []byte(r)}); err != nil {
				return err
			}
		}
		for _, m := range marks {
			for p := 0; p < 2; p++ {
				if _, err := c.Publisher().PublishTo(ctx, topic.Partition{Topic: name, Index: p}, m.Message()); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
