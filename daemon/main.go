package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/consumerd/consumerd/shard"
)

// Options configure a command tree. The zero value of every field but Apps
// means "the process's own": os.Stdin, os.Stdout, os.Stderr, os.LookupEnv,
// and SIGINT/SIGTERM delivered by signal.Notify.
type Options struct {
	// Apps are the applications this binary knows, by App.Name. The first
	// is the default of `serve --app`.
	Apps []shard.App
	// Stdin, Stdout, Stderr replace the process's streams.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// LookupEnv replaces os.LookupEnv for the flags' environment mirrors.
	LookupEnv func(string) (string, bool)
	// Signals, when set, replaces SIGINT/SIGTERM as serve's shutdown
	// requests (tests send on it).
	Signals <-chan os.Signal
	// Name is the program's name in help and error messages (default
	// "consumerd"): a custom daemon's users type its own name. It is a
	// field rather than os.Args[0] so that help reads the same however the
	// binary was invoked (a symlink, a test binary, go run).
	Name string
	// Commands are extra client subcommands of a custom daemon, added next
	// to the built-in ones and connected like them (see Command).
	Commands []Command
}

// Main runs the consumerd command line (os.Args) with apps registered and
// returns the process exit code: 0 on success, 1 on any error (printed to
// stderr as one line, never a stack trace), 2 on a usage error.
//
// A custom daemon is:
//
//	func main() { os.Exit(daemon.Main(myapp.App())) }
func Main(apps ...shard.App) int {
	return Run(context.Background(), os.Args[1:], Options{Apps: apps})
}

// Run runs the command line args (without the program name) and returns the
// exit code, as Main does.
func Run(ctx context.Context, args []string, opts Options) (code int) {
	opts = opts.withDefaults()
	name := opts.Name
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(opts.Stderr, "%s: internal error: %v\n", name, r)
			code = 1
		}
	}()
	root := newCommand(opts)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) || isCobraUsageError(err) {
		fmt.Fprintf(opts.Stderr, "%s: %v\nRun '%s --help' for usage.\n", name, err, name)
		return 2
	}
	var ec exitCodeError
	if errors.As(err, &ec) {
		if ec.err != nil {
			fmt.Fprintf(opts.Stderr, "%s: %v\n", name, ec.err)
		}
		return ec.code
	}
	fmt.Fprintf(opts.Stderr, "%s: %v\n", name, err)
	return 1
}

func (o Options) withDefaults() Options {
	if o.Stdin == nil {
		o.Stdin = os.Stdin
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	if o.Name == "" {
		o.Name = "consumerd"
	}
	return o
}

// signals returns the channel serve listens on for shutdown requests, and a
// function that stops the delivery.
func (o Options) signals() (<-chan os.Signal, func()) {
	if o.Signals != nil {
		return o.Signals, func() {}
	}
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	return ch, func() { signal.Stop(ch) }
}

// app returns the registered application named name.
func (o Options) app(name string) (shard.App, error) {
	for _, a := range o.Apps {
		if a.Name == name {
			return a, nil
		}
	}
	return shard.App{}, fmt.Errorf("unknown app %q (this binary knows: %s)", name, strings.Join(o.appNames(), ", "))
}

// appNamesInOrder are the apps' names in registration order.
func (o Options) appNamesInOrder() []string {
	names := make([]string, 0, len(o.Apps))
	for _, a := range o.Apps {
		names = append(names, a.Name)
	}
	return names
}

func (o Options) appNames() []string {
	var names []string
	for _, a := range o.Apps {
		names = append(names, a.Name)
	}
	sort.Strings(names)
	if len(names) == 0 {
		names = []string{"none"}
	}
	return names
}

func (o Options) appMap() map[string]shard.App {
	m := make(map[string]shard.App, len(o.Apps))
	for _, a := range o.Apps {
		m[a.Name] = a
	}
	return m
}

// usageError marks a bad flag value or argument (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// UsageError marks err as a usage error: Run prints it with a pointer to
// --help and exits 2, as for a bad built-in flag. A Command's Run returns
// it for a bad value of one of its own flags. A nil err stays nil.
func UsageError(err error) error {
	if err == nil {
		return nil
	}
	return usageError{err}
}

// exitCodeError carries a specific exit code (err may be nil: already reported).
type exitCodeError struct {
	code int
	err  error
}

func (e exitCodeError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}
func (e exitCodeError) Unwrap() error { return e.err }

// isCobraUsageError recognises cobra's and pflag's own argument errors.
func isCobraUsageError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown flag", "unknown shorthand flag", "unknown command", "flag needs an argument",
		"invalid argument", "accepts ", "requires at least", "required flag", "bad flag syntax", "if any flags in the group"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// newCommand builds the consumerd command tree.
func newCommand(opts Options) *cobra.Command {
	opts = opts.withDefaults()
	root := &cobra.Command{
		Use:   opts.Name,
		Short: "Run stateful stream consumers as a cluster (etcd + NATS JetStream + RocksDB)",
		Long: `consumerd runs stateful stream consumers as a cluster. Members register in etcd;
the allocator leader assigns shards (a primary and hot standbys) to members; each
shard rebuilds its RocksDB from its recovery log and the primary consumes its topic
partitions exactly once.

Every flag can also be set from the environment: CONSUMERD_ + the flag name
upper-cased with '.' and '-' as '_' (--etcd.lease-ttl is CONSUMERD_ETCD_LEASE_TTL).
A flag given on the command line wins over its environment variable.`,
		Version:       build.String(), // version.go
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd, opts.LookupEnv); err != nil {
				return usageError{err}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	root.SetIn(opts.Stdin)
	root.SetOut(opts.Stdout)
	root.SetErr(opts.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	root.AddCommand(newServeCommand(opts))
	root.AddCommand(newShardsCommand(opts))
	root.AddCommand(newTopicsCommand(opts))
	root.AddCommand(newMembersCommand(opts))
	root.AddCommand(newPublishCommand(opts))
	root.AddCommand(newReadCommand(opts))
	root.AddCommand(newQueryCommand(opts))
	addCustomCommands(root, opts) // command.go

	var annotate func(c *cobra.Command)
	annotate = func(c *cobra.Command) {
		annotateEnv(c.Flags())
		annotateEnv(c.PersistentFlags())
		for _, sub := range c.Commands() {
			annotate(sub)
		}
	}
	annotate(root)
	return root
}
