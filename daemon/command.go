package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// Command is a client subcommand a custom daemon adds (Options.Commands).
// It takes the connection flags of the built-in client commands
// (--etcd.endpoints, --etcd.prefix, --wal.url, --wal.namespace, TLS, ...),
// with their environment mirrors, and runs connected to the cluster they
// name: the daemon dials etcd and NATS, follows the cluster's recorded WAL
// namespace, and hands Run a Client, closed when Run returns.
//
// A Command's Run returning an error wrapped by cmdline.Usage exits 2 with a
// pointer to --help, like a bad built-in flag; any other error exits 1.
type Command struct {
	// Use is the one-line usage; its first word is the command's name,
	// which must not be a built-in command's.
	Use string
	// Short and Long are the help texts.
	Short, Long string
	// Flags binds the command's own flags (optional).
	Flags func(fs *pflag.FlagSet)
	// Check, when set, validates the command's own flags before anything is
	// dialled: a usage error then does not wait for an unreachable etcd.
	// Its error is a usage error (exit 2) unless it is already one.
	Check func() error
	// Run runs the command. stdout and stderr are the daemon's
	// (Options.Stdout, Options.Stderr).
	Run func(ctx context.Context, c *Client, stdout, stderr io.Writer) error
}

// Client is a connected cluster client handed to a Command: the one etcd
// client, WAL connection and topic publisher of the command, and the
// daemon's code paths for topics, shard specs and reading partitions, so a
// Command follows the same rules as `topics create`, `shards apply` and
// `read`.
type Client struct {
	cf     connect.ClientFlags
	apps   map[string]shard.App
	etcd   *clientv3.Client
	opener wal.Opener
	pub    *topic.Publisher
}

// Etcd is the etcd client. Keys of the cluster are under Prefix.
func (c *Client) Etcd() *clientv3.Client { return c.etcd }

// Prefix is the cluster's root in etcd (--etcd.prefix).
func (c *Client) Prefix() string { return c.cf.EtcdPrefix }

// Opener opens WAL channels in the cluster's namespace.
func (c *Client) Opener() wal.Opener { return c.opener }

// Publisher publishes to topics through Opener (term 0, like `publish`).
func (c *Client) Publisher() *topic.Publisher { return c.pub }

// WALURL is the NATS URL the client is connected to (--wal.url), for
// error messages.
func (c *Client) WALURL() string { return c.cf.WALURL }

// Topic reads topic name's description; an unknown topic is an error
// naming the topics there are and how to create one.
func (c *Client) Topic(ctx context.Context, name string) (topic.Description, error) {
	return c.topics().Get(ctx, name)
}

// CreateTopic creates topic d as `topics create` does. An existing topic
// with the same partition count is left as it is (created is false); one
// with another count is an error naming both (a partition count never
// changes). It reports whether it created the topic, unlike the brief
// "error only" shape, so that a setup command can say what it did and a
// re-run can show that it changed nothing.
func (c *Client) CreateTopic(ctx context.Context, d topic.Description) (created bool, err error) {
	return c.topics().Create(ctx, d)
}

// ApplySpecs creates or replaces shard specs as `shards apply` does (every
// spec valid, of an app this binary registers, reading partitions that
// exist; writes guarded against concurrent changes). A spec equal to the
// stored one is not written: applying the same list twice changes nothing.
// Applied says how many were created, updated and left unchanged.
func (c *Client) ApplySpecs(ctx context.Context, specs []*shard.Spec) (Applied, error) {
	a, err := cluster.ApplySpecs(ctx, c.etcd, c.cf.EtcdPrefix, c.apps, specs)
	return Applied(a), err
}

// Applied counts what Client.ApplySpecs did.
type Applied struct {
	Created, Updated, Unchanged int
}

// ErrStopRead, returned by the callback of ReadPartition or
// FollowPartition, ends the read early without an error.
var ErrStopRead = errors.New("daemon: stop reading")

// ReadPartition calls fn with every message of part in id order, from its
// oldest to the last one it held when ReadPartition was called (its head),
// as `read --partition` does; an empty partition calls fn never. It stops
// at fn's first error (ErrStopRead: returns nil). Marks and data alike are
// delivered: the message's properties say which is which.
func (c *Client) ReadPartition(ctx context.Context, part topic.Partition, fn func(message.ImmutableMessage) error) error {
	return c.readPartition(ctx, part, topic.FromOldest(), fn)
}

// ReadPartitionFrom is ReadPartition from message id from on (`read
// --partition --from ID`): fn is called never when from is past the head.
func (c *Client) ReadPartitionFrom(ctx context.Context, part topic.Partition, from message.MessageID, fn func(message.ImmutableMessage) error) error {
	if from == 0 {
		return c.ReadPartition(ctx, part, fn)
	}
	return c.readPartition(ctx, part, topic.FromID(from), fn)
}

func (c *Client) readPartition(ctx context.Context, part topic.Partition, start topic.Start, fn func(message.ImmutableMessage) error) error {
	r, err := c.openReader(ctx, part, start, fn)
	if err != nil {
		return err
	}
	defer r.Close()
	if err = r.ToHeads(ctx); errors.Is(err, ErrStopRead) {
		return nil
	}
	return err
}

// FollowPartition calls fn with every message of part in id order, from its
// oldest, and then with new messages as they are stored, until fn returns
// an error (ErrStopRead: FollowPartition returns nil) or ctx ends (it then
// returns an error wrapping ctx.Err()). It is for a reader that waits for a
// condition the messages will satisfy, such as an end-of-input mark.
func (c *Client) FollowPartition(ctx context.Context, part topic.Partition, fn func(message.ImmutableMessage) error) error {
	r, err := c.openReader(ctx, part, topic.FromOldest(), fn)
	if err != nil {
		return err
	}
	defer r.Close()
	err = r.Follow(ctx)
	switch {
	case errors.Is(err, ErrStopRead):
		return nil
	case err != nil:
		return err
	case ctx.Err() != nil: // Follow returns nil when ctx ends: for read --follow, a normal end
		return fmt.Errorf("reading topic %s partition %d: %w", part.Topic, part.Index, ctx.Err())
	}
	return nil
}

// openReader opens part for a read from start delivering to fn.
func (c *Client) openReader(ctx context.Context, part topic.Partition, start topic.Start, fn func(message.ImmutableMessage) error) (*topic.Reader, error) {
	d, err := c.Topic(ctx, part.Topic)
	if err != nil {
		return nil, err
	}
	if part.Index < 0 || part.Index >= d.Partitions {
		return nil, fmt.Errorf("topic %s has %d partition(s), 0..%d: partition %d does not exist", d.Name, d.Partitions, d.Partitions-1, part.Index)
	}
	return topic.OpenReader(ctx, topic.ReaderConfig{
		Opener: c.opener, Topic: part.Topic, Partitions: []int{part.Index}, Start: start,
		OpenTimeout: c.cf.DialTimeout, Server: "NATS at " + c.cf.WALURL,
		Deliver: func(_ int, m *message.ImmutableMessage) error { return fn(*m) },
	})
}

// builtinNames are the names of the built-in commands of root.
func builtinNames(root *cobra.Command) map[string]bool {
	names := map[string]bool{"help": true, "completion": true}
	for _, c := range root.Commands() {
		names[c.Name()] = true
	}
	return names
}

// newCustomCommand makes c a cobra command with the client flags.
func newCustomCommand(prog cmdline.Program, c Command) *cobra.Command {
	var cf connect.ClientFlags
	cmd := &cobra.Command{
		Use:   c.Use,
		Short: c.Short,
		Long:  c.Long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c.Run == nil {
				return fmt.Errorf("command %s has no Run (a bug of this binary)", cmd.Name())
			}
			if c.Check != nil {
				if err := c.Check(); err != nil {
					return cmdline.Usage(err)
				}
			}
			ctx := cmd.Context()
			cli, err := cf.Etcd(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			opener, err := cf.OpenWAL(hclog.NewNullLogger(), 0)
			if err != nil {
				return err
			}
			pub := topic.NewPublisher(opener, hclog.NewNullLogger())
			// Bounded like publish's: a silent NATS must not keep the
			// command from ending.
			defer cmdline.CloseBy(ctx, func() { pub.Close(); opener.Close() })
			client := &Client{cf: cf, apps: prog.AppMap(), etcd: cli, opener: opener, pub: pub}
			return c.Run(ctx, client, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cf.Bind(cmd.Flags())
	if c.Flags != nil {
		c.Flags(cmd.Flags())
	}
	return cmd
}

// addCustomCommands adds a custom daemon's Commands to root. A name that is empty or
// taken is a bug of the binary, not of its user: it panics (Run reports it
// as an internal error) rather than shadowing a built-in command.
func addCustomCommands(root *cobra.Command, prog cmdline.Program, custom []Command) {
	taken := builtinNames(root)
	for _, c := range custom {
		name, _, _ := strings.Cut(strings.TrimSpace(c.Use), " ")
		if name == "" || taken[name] {
			panic(fmt.Sprintf("daemon.Options.Commands: command %q: its name is empty or already taken (by a built-in command or an earlier Command)", c.Use))
		}
		taken[name] = true
		root.AddCommand(newCustomCommand(prog, c))
	}
}

// topics is the cluster's topic registry.
func (c *Client) topics() *topic.Registry {
	return &topic.Registry{Client: c.etcd, Prefix: c.cf.EtcdPrefix}
}
