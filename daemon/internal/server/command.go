package server

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/shard"
)

// NewCommand is `serve`: run one member of the cluster with prog's apps.
func NewCommand(prog cmdline.Program) *cobra.Command {
	var cfg Config
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a member: take shard assignments from etcd and run them",
		Long: `serve runs one ` + prog.Name + ` member. With no --etcd.endpoints it starts an embedded
etcd (data in <data-dir>/etcd); with no --wal.url an embedded nats-server with
JetStream (store in <data-dir>/nats). On that embedded default it creates
the topics of every --app (default: every app the binary knows), with
--embedded.shards partitions each, and one shard per partition of each
app that has none, so a lone '` + prog.Name + ` serve' is a working one-member cluster.

On SIGTERM or SIGINT the member marks itself exiting; the allocator leader moves
its shards to other members (make-before-break) and serve exits 0 once it holds
nothing, or 1 after --shutdown-timeout. A second signal exits at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return cmdline.Usage(err)
			}
			var apps []shard.App
			for _, name := range cfg.Apps {
				app, err := prog.App(name)
				if err != nil {
					return cmdline.Usage(fmt.Errorf("--app: %w", err))
				}
				apps = append(apps, app)
			}
			sigs, stop := prog.NotifySignals()
			defer stop()
			p := Process{Embedded: apps, Apps: prog.AppMap(), Log: prog.Stderr, Signals: sigs}
			if prog.RealSignals() { // a second one ends the process at once
				p.HardExit = func() { os.Exit(1) }
			}
			return Run(cmd.Context(), cfg, p)
		},
	}
	cfg.Bind(cmd.Flags(), prog.AppNamesInOrder())
	return cmd
}
