package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/wal"
)

// acceptFlags are the flags of `shards accept-source`.
type acceptFlags struct {
	cf         connect.ClientFlags
	shardID    string
	topic      string
	partition  int
	lostSource bool
	from       string
	yes        bool
}

func newShardsAcceptSourceCommand(prog cmdline.Program) *cobra.Command {
	var f acceptFlags
	cmd := &cobra.Command{
		Use:   "accept-source (--shard ID [--topic T --partition P] | --lost-source) --from start|end --yes",
		Short: "Accept that a shard's source lost messages the shard had not read: read on from the start or the end of what it holds now",
		Long: `accept-source is the answer to a shard FAILED with "a source lost messages the
shard has not read": the source's stream was deleted and created again
(its ids started over), went backwards (a NATS store restored from an older
copy), or lost messages after the shard's offset before the shard read them
(a purge, retention limits). The shard stopped rather than skip messages or
take new ones for ids it had consumed. If the data can be restored, restore it
and run 'consumerd shards unassign --failed --shard ID' instead.

accept-source accepts the loss. It reads what the source's channel holds now
and writes a source reset into the shard's spec — read after the channel's
first id minus one (--from start: every message it holds now) or after its
last id (--from end: only messages published from now on), in the channel's
current incarnation, with a term above every term so far — and unassigns the
shard's replicas, in one etcd transaction per shard. The next primary applies
the reset only while the channel is still that incarnation, records it with
the source's offset in the shard's state (so it holds across failovers) and
reads on; the reset is then inert, and a later loss fails the shard again.
The shard's state is kept: what it counted from the lost messages stays.
A channel that no longer exists is created, empty.
  --shard ID       that shard: the source its FAILED error names, or
                   --topic/--partition, or its only source
  --lost-source    every shard with a replica FAILED for that reason`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd) },
	}
	f.cf.Bind(cmd.Flags())
	cmd.Flags().StringVar(&f.shardID, "shard", "", "the shard whose source to accept")
	cmd.Flags().StringVar(&f.topic, "topic", "", "the source's topic (with --shard and --partition)")
	cmd.Flags().IntVar(&f.partition, "partition", -1, "the source's partition (with --shard and --topic)")
	cmd.Flags().BoolVar(&f.lostSource, "lost-source", false, "every shard with a replica FAILED because a source lost messages")
	cmd.Flags().StringVar(&f.from, "from", "", "start: read every message the channel holds now; end: only messages published after now")
	cmd.Flags().BoolVar(&f.yes, "yes", false, "confirm: the lost messages are never read")
	return cmd
}

func (f *acceptFlags) run(cmd *cobra.Command) error {
	switch {
	case (f.shardID == "") == !f.lostSource:
		return cmdline.Usagef("give exactly one of --shard ID or --lost-source")
	case (f.topic == "") != (f.partition < 0):
		return cmdline.Usagef("give --topic and --partition together")
	case f.topic != "" && f.lostSource:
		return cmdline.Usagef("--topic and --partition go with --shard, not --lost-source")
	case f.from != "start" && f.from != "end":
		return cmdline.Usagef("--from: want start or end, got %q", f.from)
	}
	ctx := cmd.Context()
	cli, snap, err := connectAndLoad(ctx, &f.cf)
	if err != nil {
		return err
	}
	defer cli.Close()
	targets, err := f.targets(snap)
	if err != nil {
		return err
	}
	if len(targets) == 0 {
		fmt.Fprintln(cmd.OutOrStdout(), "no shard has a replica FAILED because a source lost messages")
		return nil
	}
	ids := make([]string, 0, len(targets))
	var named []string
	for id, srcs := range targets {
		ids = append(ids, id)
		for _, s := range srcs {
			named = append(named, id+" "+s.Channel())
		}
	}
	sort.Strings(ids)
	sort.Strings(named)
	if !f.yes {
		return cmdline.Usagef("accept-source has %s read on from the %s of what its channel holds now (%s); the messages it lost are never read: run again with --yes to confirm",
			plural(len(named), "source"), f.from, strings.Join(named, ", "))
	}
	base, err := allocator.Terms{Client: cli, Prefix: f.cf.EtcdPrefix}.Base(ctx)
	if err != nil {
		return err
	}
	opener, err := f.cf.OpenWAL(hclog.NewNullLogger(), 0)
	if err != nil {
		return err
	}
	defer opener.Close()
	// Above every term given out so far (as shards reset's log_reset_term),
	// so above every reset term a shard's state recorded.
	term := base + snap.Revision + 1
	for _, id := range ids {
		var resets []shard.SourceReset
		for _, src := range targets[id] {
			r, err := sourceReset(ctx, opener, src, f.from, term)
			if err != nil {
				return err
			}
			resets = append(resets, r)
		}
		if err := cluster.AcceptSources(ctx, cli, f.cf.EtcdPrefix, snap, id, resets, cmd.OutOrStdout()); err != nil {
			return err
		}
	}
	return nil
}

// targets are the sources to accept, by shard.
func (f *acceptFlags) targets(snap allocator.Snapshot) (map[string][]shard.Source, error) {
	lost := cluster.LostSources(snap)
	if f.lostSource {
		return lost, nil
	}
	info, ok := snap.Items[f.shardID]
	spec, isSpec := info.Item.(*shard.Spec)
	if !ok || !isSpec || spec == nil {
		if err := cluster.ShardExists(snap, f.shardID); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("--shard: the spec of %s does not decode (%s): write a valid one with 'consumerd shards apply' first", f.shardID, snap.InvalidItems[f.shardID])
	}
	switch {
	case f.topic != "":
		src := shard.Source{Topic: f.topic, Partition: f.partition}
		if !containsSource(spec.Sources, src) {
			return nil, cmdline.Usagef("--topic %s --partition %d: not a source of shard %s", f.topic, f.partition, f.shardID)
		}
		return map[string][]shard.Source{f.shardID: {src}}, nil
	case len(lost[f.shardID]) > 0:
		return map[string][]shard.Source{f.shardID: lost[f.shardID]}, nil
	case len(spec.Sources) == 1:
		return map[string][]shard.Source{f.shardID: spec.Sources}, nil
	}
	return nil, cmdline.Usagef("shard %s reads %d sources and none is FAILED as lost: name one with --topic and --partition", f.shardID, len(spec.Sources))
}

func containsSource(srcs []shard.Source, s shard.Source) bool {
	for _, x := range srcs {
		if x == s {
			return true
		}
	}
	return false
}

// sourceReset reads what src's channel holds now and makes the reset that
// reads on from its start or end.
func sourceReset(ctx context.Context, opener wal.Opener, src shard.Source, from string, term int64) (shard.SourceReset, error) {
	w, err := opener.Open(ctx, &wal.OpenOption{Channel: src.Channel()})
	if err != nil {
		return shard.SourceReset{}, fmt.Errorf("open %s: %w", src.Channel(), err)
	}
	defer w.Close()
	b, err := w.Bounds(ctx)
	if err != nil {
		return shard.SourceReset{}, err
	}
	after := b.Last
	if from == "start" {
		after = max(b.First, 1) - 1
	}
	return shard.SourceReset{Topic: src.Topic, Partition: src.Partition, Incarnation: b.Incarnation,
		After: uint64(after), Term: term, From: from}, nil
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
