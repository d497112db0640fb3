package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/consumerd/consumerd/daemon/internal/buildinfo"
	"github.com/consumerd/consumerd/daemon/internal/cli"
	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/daemon/internal/server"
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
// stderr as one line), 2 on a usage error.
//
// A custom daemon is:
//
//	func main() { os.Exit(daemon.Main(myapp.App())) }
func Main(apps ...shard.App) int {
	return Run(context.Background(), os.Args[1:], Options{Apps: apps})
}

// Run runs the command line args (without the program name) and returns the
// exit code, as Main does. A panic is a bug: it exits 1 with the panic and
// its stack trace on stderr.
func Run(ctx context.Context, args []string, opts Options) (code int) {
	prog := opts.program()
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(prog.Stderr, "%s: internal error: %v\n%s", prog.Name, r, debug.Stack())
			code = 1
		}
	}()
	root := newCommand(prog, opts.Commands)
	root.SetArgs(args)
	return exitCode(prog, root.ExecuteContext(ctx))
}

// exitCode reports err on prog's stderr, as one line, and returns its exit
// code: 2 for a usage error (with a pointer to --help), a cmdline.ExitError's
// own, else 1.
func exitCode(prog cmdline.Program, err error) int {
	if err == nil {
		return 0
	}
	if cmdline.IsUsage(err) {
		fmt.Fprintf(prog.Stderr, "%s: %v\nRun '%s --help' for usage.\n", prog.Name, err, prog.Name)
		return 2
	}
	if ec, ok := errors.AsType[cmdline.ExitError](err); ok {
		if ec.Err != nil {
			fmt.Fprintf(prog.Stderr, "%s: %v\n", prog.Name, ec.Err)
		}
		return ec.Code
	}
	fmt.Fprintf(prog.Stderr, "%s: %v\n", prog.Name, err)
	return 1
}

// program is opts with the process's own streams, environment and name
// where opts leaves them unset.
func (o Options) program() cmdline.Program {
	p := cmdline.Program{Apps: o.Apps, Name: o.Name, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr, LookupEnv: o.LookupEnv, Signals: o.Signals}
	if p.Stdin == nil {
		p.Stdin = os.Stdin
	}
	if p.Stdout == nil {
		p.Stdout = os.Stdout
	}
	if p.Stderr == nil {
		p.Stderr = os.Stderr
	}
	if p.LookupEnv == nil {
		p.LookupEnv = os.LookupEnv
	}
	if p.Name == "" {
		p.Name = "consumerd"
	}
	return p
}

// UsageError marks err as a usage error: Run prints it with a pointer to
// --help and exits 2, as for a bad built-in flag. A Command's Run returns
// it for a bad value of one of its own flags. A nil err stays nil.
func UsageError(err error) error { return cmdline.Usage(err) }

// newCommand builds the command tree: serve, the built-in client commands
// and the custom daemon's own.
func newCommand(prog cmdline.Program, custom []Command) *cobra.Command {
	root := &cobra.Command{
		Use:   prog.Name,
		Short: "Run stateful stream consumers as a cluster (etcd + NATS JetStream + RocksDB)",
		Long: prog.Name + ` runs stateful stream consumers as a cluster. Members register in etcd;
the allocator leader assigns shards (a primary and hot standbys) to members; each
shard rebuilds its RocksDB from its recovery log and the primary consumes its topic
partitions exactly once.

Every flag can also be set from the environment: CONSUMERD_ + the flag name
upper-cased with '.' and '-' as '_' (--etcd.lease-ttl is CONSUMERD_ETCD_LEASE_TTL).
A flag given on the command line wins over its environment variable.`,
		Version:       buildinfo.Current.String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return cmdline.Usage(cmdline.ApplyEnv(cmd, prog.LookupEnv))
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	root.SetIn(prog.Stdin)
	root.SetOut(prog.Stdout)
	root.SetErr(prog.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cmdline.Usage(err) })

	root.AddCommand(server.NewCommand(prog))
	root.AddCommand(cli.Commands(prog)...)
	addCustomCommands(root, prog, custom)

	var annotate func(c *cobra.Command)
	annotate = func(c *cobra.Command) {
		cmdline.AnnotateEnv(c.Flags())
		cmdline.AnnotateEnv(c.PersistentFlags())
		for _, sub := range c.Commands() {
			annotate(sub)
		}
	}
	annotate(root)
	return root
}
