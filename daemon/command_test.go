package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
)

// runWith runs args with extra Commands against c's etcd and NATS; it
// returns stdout, stderr and the exit code.
func (c *harness) runWith(cmds []Command, name string, args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	args = append(args, "--etcd.endpoints", c.etcd, "--wal.url", c.nats)
	code := Run(c.t.Context(), args, Options{Apps: c.apps, Stdout: &out, Stderr: &errb, Commands: cmds, Name: name})
	return out.String(), errb.String(), code
}

// TestCommandClient: a Command gets the connection flags and a Client
// whose topic, spec and read paths are the built-in commands'.
func TestCommandClient(t *testing.T) {
	c := newCLI(t)
	var step string
	var n int
	cmd := Command{
		Use:   "demo --step S [--n N]",
		Short: "a test command",
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&step, "step", "", "what to do")
			fs.IntVar(&n, "n", 1, "a positive number")
		},
		Check: func() error {
			if n < 1 {
				return fmt.Errorf("--n: %d must be at least 1", n)
			}
			return nil
		},
		Run: func(ctx context.Context, cl *Client, stdout, _ io.Writer) error {
			switch step {
			case "topics":
				for _, want := range []bool{true, false} {
					created, err := cl.CreateTopic(ctx, topic.Description{Name: "words", Partitions: 2})
					if err != nil || created != want {
						return fmt.Errorf("CreateTopic words/2: created %v, %v; want %v", created, err, want)
					}
				}
				_, err := cl.CreateTopic(ctx, topic.Description{Name: "words", Partitions: 3})
				fmt.Fprintln(stdout, "other count:", err)
				d, err := cl.Topic(ctx, "words")
				fmt.Fprintln(stdout, "topic:", d.Name, d.Partitions, err)
				_, err = cl.Topic(ctx, "nope")
				fmt.Fprintln(stdout, "unknown:", err)
			case "specs":
				specs, err := wordcount.App().SpecsFor(2, 1)
				if err != nil {
					return err
				}
				for i := 0; i < 2; i++ {
					a, err := cl.ApplySpecs(ctx, specs)
					fmt.Fprintf(stdout, "apply %d: %+v %v\n", i, a, err)
				}
				specs[1].HotStandbys = 0
				a, err := cl.ApplySpecs(ctx, specs)
				fmt.Fprintf(stdout, "changed: %+v %v\n", a, err)
				bad := &shard.Spec{ID: "x-0000", App: "nosuch", Sources: []shard.Source{{Topic: "words", Partition: 0}}}
				_, err = cl.ApplySpecs(ctx, []*shard.Spec{bad})
				fmt.Fprintln(stdout, "unknown app:", err)
				far := &shard.Spec{ID: "wordcount-0009", App: "wordcount", Sources: []shard.Source{{Topic: "words", Partition: 9}}}
				_, err = cl.ApplySpecs(ctx, []*shard.Spec{far})
				fmt.Fprintln(stdout, "missing partition:", err)
			case "read":
				part := topic.Partition{Topic: "words", Index: 1}
				var got []string
				collect := func(m message.ImmutableMessage) error { got = append(got, string(m.Payload)); return nil }
				if err := cl.ReadPartition(ctx, part, collect); err != nil {
					return err
				}
				fmt.Fprintln(stdout, "empty:", len(got))
				for i := 0; i < 3; i++ {
					if _, err := cl.Publisher().PublishTo(ctx, part, message.MutableMessage{Payload: []byte(fmt.Sprint("m", i))}); err != nil {
						return err
					}
				}
				if err := cl.ReadPartition(ctx, part, collect); err != nil {
					return err
				}
				fmt.Fprintln(stdout, "read:", got)
				// Follow: the fourth message comes after the follow started.
				got = nil
				first := make(chan struct{})
				done := make(chan error, 1)
				go func() {
					done <- cl.FollowPartition(ctx, part, func(m message.ImmutableMessage) error {
						got = append(got, string(m.Payload))
						if len(got) == 1 {
							close(first)
						}
						if string(m.Payload) == "end" {
							return ErrStopRead
						}
						return nil
					})
				}()
				<-first
				if _, err := cl.Publisher().PublishTo(ctx, part, message.MutableMessage{Payload: []byte("end")}); err != nil {
					return err
				}
				err := <-done
				fmt.Fprintln(stdout, "followed:", got, err)
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				err = cl.FollowPartition(cctx, part, func(message.ImmutableMessage) error { return nil })
				fmt.Fprintln(stdout, "cancelled:", errors.Is(err, context.Canceled))
			case "usage":
				return cmdline.Usage(errors.New("--step usage: refused by Run"))
			default:
				return fmt.Errorf("--step %q: unknown", step)
			}
			return nil
		},
	}
	cmds := []Command{cmd}
	ok := func(args ...string) string {
		t.Helper()
		out, errs, code := c.runWith(cmds, "", args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s%s", args, code, out, errs)
		}
		return out
	}
	out := ok("demo", "--step", "topics")
	for _, want := range []string{
		"other count: topic words exists with 2 partitions; refusing 3",
		"topic: words 2 <nil>",
		`unknown: topic "nope" does not exist (topics: words)`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("topics: output lacks %q:\n%s", want, out)
		}
	}
	out = ok("demo", "--step", "specs")
	for _, want := range []string{
		"apply 0: {Created:2 Updated:0 Unchanged:0} <nil>",
		"apply 1: {Created:0 Updated:0 Unchanged:2} <nil>",
		"changed: {Created:0 Updated:1 Unchanged:1} <nil>",
		`unknown app: shard x-0000: app: unknown app "nosuch" (known: wordcount)`,
		"missing partition: shard wordcount-0009: sources[0]: topic words has 2 partitions (0..1); partition 9 does not exist",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("specs: output lacks %q:\n%s", want, out)
		}
	}
	// What ApplySpecs wrote is what `shards list` sees.
	if list := c.ok("", "shards", "list"); !strings.Contains(list, "wordcount-0000") || !strings.Contains(list, "wordcount-0001") {
		t.Errorf("shards list after ApplySpecs:\n%s", list)
	}
	out = ok("demo", "--step", "read")
	for _, want := range []string{"empty: 0", "read: [m0 m1 m2]", "followed: [m0 m1 m2 end] <nil>", "cancelled: true"} {
		if !strings.Contains(out, want) {
			t.Errorf("read: output lacks %q:\n%s", want, out)
		}
	}

	// Usage errors, from Check (before dialling) and from Run, exit 2 with
	// the program's name.
	if _, errs, code := c.runWith(cmds, "tool", "demo", "--n", "0"); code != 2 || !strings.Contains(errs, "tool: --n: 0 must be at least 1\nRun 'tool --help' for usage.") {
		t.Errorf("--n 0: exit %d, stderr %q; want 2 naming --n and tool", code, errs)
	}
	if _, errs, code := c.runWith(cmds, "", "demo", "--step", "usage"); code != 2 || !strings.Contains(errs, "consumerd: --step usage: refused by Run") {
		t.Errorf("usage from Run: exit %d, stderr %q; want 2", code, errs)
	}
	if _, errs, code := c.runWith(cmds, "", "demo", "--step", "bogus"); code != 1 || !strings.Contains(errs, `--step "bogus": unknown`) {
		t.Errorf("error from Run: exit %d, stderr %q; want 1", code, errs)
	}
	if _, errs, code := c.runWith(cmds, "", "demo", "--bogus"); code != 2 || !strings.Contains(errs, "unknown flag: --bogus") {
		t.Errorf("unknown flag: exit %d, stderr %q; want 2", code, errs)
	}
	// Help lists the command under the program's name, with the client flags.
	var help bytes.Buffer
	if code := Run(t.Context(), []string{"--help"}, Options{Apps: c.apps, Commands: cmds, Name: "tool", Stdout: &help, Stderr: &help}); code != 0 ||
		!strings.Contains(help.String(), "tool [command]") || !strings.Contains(help.String(), "a test command") {
		t.Errorf("tool --help: exit %d:\n%s", code, help.String())
	}
	if out, _, code := c.runWith(cmds, "tool", "--help"); code != 2 || out != "" {
		t.Errorf("tool --help --etcd.endpoints ...: exit %d, want 2 (the root takes no connection flags):\n%s", code, out)
	}
	if out, _, code := c.runWith(cmds, "tool", "demo", "--help"); code != 0 || !strings.Contains(out, "--etcd.endpoints") || !strings.Contains(out, "[$CONSUMERD_STEP]") {
		t.Errorf("tool demo --help: exit %d:\n%s", code, out)
	}
	// A Command may not shadow a built-in one.
	if _, errs, code := c.runWith([]Command{{Use: "publish"}}, "", "demo"); code != 1 || !strings.Contains(errs, `internal error: daemon.Options.Commands: command "publish"`) {
		t.Errorf("shadowing publish: exit %d, stderr %q", code, errs)
	}
}
