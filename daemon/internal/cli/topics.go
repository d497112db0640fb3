package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/internal/ident"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
)

// Topics live in etcd at <root>/topics/<name> (topic.Key): the one place a
// topic's partition count comes from.

func newTopicsCommand(prog cmdline.Program) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topics",
		Short: "Create, list and delete topics",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newTopicsCreateCommand(), newTopicsListCommand(prog), newTopicsDeleteCommand(prog))
	return cmd
}

func newTopicsCreateCommand() *cobra.Command {
	var cf connect.ClientFlags
	var name string
	var partitions int
	cmd := &cobra.Command{
		Use:   "create --name T --partitions N",
		Short: "Create topic T with N partitions (1.." + strconv.Itoa(topic.MaxPartitions) + "); N never changes",
		Long: `create writes topic T's record to etcd (<prefix>/topics/T). publish routes a key to
partition hash(key) mod N, and 'shards create' makes one shard per partition. A
topic's partition count never changes: creating an existing topic with the same
count does nothing, with another count is an error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d := topic.Description{Name: name, Partitions: partitions}
			if err := d.Validate(); err != nil {
				return cmdline.Usagef("%v", err)
			}
			cli, err := cf.Etcd(cmd.Context())
			if err != nil {
				return err
			}
			defer cli.Close()
			created, err := topicsAt(cli, cf.EtcdPrefix).Create(cmd.Context(), d)
			if err != nil {
				return err
			}
			if created {
				fmt.Fprintf(cmd.OutOrStdout(), "created topic %s with %d partitions\n", name, partitions)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "topic %s exists with %d partitions: unchanged\n", name, partitions)
			}
			return nil
		},
	}
	cf.Bind(cmd.Flags())
	cmd.Flags().StringVar(&name, "name", "", "topic name (required)")
	cmd.Flags().IntVar(&partitions, "partitions", 0, "number of partitions (required)")
	_ = cmd.MarkFlagRequired("name")
	_ = cmd.MarkFlagRequired("partitions")
	return cmd
}

func newTopicsListCommand(prog cmdline.Program) *cobra.Command {
	return listCommand(listSpec{
		short: "List topics: partitions, stored messages per partition, partitions no shard reads",
		rows:  topicListing,
	})
}

// topicListing is `topics list`: every topic with its stored messages per
// partition (from the WAL; a warning when it cannot say) and the partitions
// no shard reads; topic records that do not decode are warned about.
func topicListing(ctx context.Context, l listing) (any, func(io.Writer) error, error) {
	ts, err := topicsAt(l.cli, l.cf.EtcdPrefix).List(ctx)
	if err != nil {
		return nil, nil, err
	}
	unread := cluster.UnreadPartitions(ts, shard.Specs(l.snap))
	rows := make([]api.TopicRow, 0, len(ts.ByName))
	for _, n := range ts.Names() {
		rows = append(rows, api.TopicRow{Name: n, Partitions: ts.ByName[n].Partitions, Unread: append([]int{}, unread[n]...)})
	}
	if len(rows) > 0 {
		if err := countMessages(ctx, *l.cf, rows); err != nil {
			fmt.Fprintf(l.stderr, "WARNING: stored message counts unavailable: %v\n", err)
		}
	}
	for _, err := range ts.Bad {
		fmt.Fprintf(l.stderr, "WARNING: %v\n", err)
	}
	return rows, func(w io.Writer) error { return writeTopicTable(w, rows) }, nil
}

// countMessages fills each row's Messages from the WAL.
func countMessages(ctx context.Context, cf connect.ClientFlags, rows []api.TopicRow) error {
	opener, err := cf.OpenWAL(hclog.NewNullLogger(), 0)
	if err != nil {
		return err
	}
	defer opener.Close()
	for i := range rows {
		counts := make([]int64, rows[i].Partitions)
		for p := range counts {
			n, err := countChannel(ctx, opener, topic.ChannelName(rows[i].Name, p))
			if err != nil {
				return err
			}
			counts[p] = n
		}
		rows[i].Messages = counts
	}
	return nil
}

func countChannel(ctx context.Context, opener wal.Opener, ch string) (int64, error) {
	w, err := opener.Open(ctx, &wal.OpenOption{Channel: ch})
	if err != nil {
		return 0, err
	}
	defer w.Close()
	c, ok := w.(wal.Counter)
	if !ok {
		return 0, fmt.Errorf("channel %s: this WAL does not count messages: %w", ch, errors.ErrUnsupported)
	}
	n, err := c.Count(ctx)
	return int64(n), err
}

func writeTopicTable(w io.Writer, rows []api.TopicRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tMESSAGES\tUNREAD")
	for _, r := range rows {
		msgs := "-"
		if r.Messages != nil {
			var total int64
			parts := make([]string, len(r.Messages))
			for i, n := range r.Messages {
				total += n
				parts[i] = strconv.FormatInt(n, 10)
			}
			msgs = fmt.Sprintf("%d (%s)", total, strings.Join(parts, ","))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", r.Name, r.Partitions, msgs, cmdline.OrDash(cluster.PartitionList(r.Unread)))
	}
	return tw.Flush()
}

func newTopicsDeleteCommand(prog cmdline.Program) *cobra.Command {
	var cf connect.ClientFlags
	var name string
	var force bool
	cmd := &cobra.Command{
		Use:   "delete --name T [--force]",
		Short: "Delete topic T and every message stored in it (refused while a shard reads or publishes to T, unless --force)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := ident.Check(name); err != nil {
				return cmdline.Usagef("--name: %v", err)
			}
			ctx := cmd.Context()
			cli, snap, err := connectAndLoad(ctx, &cf)
			if err != nil {
				return err
			}
			defer cli.Close()
			d, err := topicsAt(cli, cf.EtcdPrefix).Get(ctx, name)
			if err != nil {
				return err
			}
			var readers []string
			for _, s := range shard.Specs(snap) {
				for _, src := range s.Sources {
					if src.Topic == name {
						readers = append(readers, s.ID)
						break
					}
				}
			}
			if len(readers) > 0 && !force {
				return fmt.Errorf("topic %s is read by %d shard(s) (%s); delete those shards first, or give --force (their primaries then fail to read it)",
					name, len(readers), strings.Join(firstN(readers, 5), ", "))
			}
			if pubs := cluster.Publishers(shard.Specs(snap), prog.AppMap(), name); len(pubs) > 0 && !force {
				return fmt.Errorf("topic %s is published to by %d shard(s) (%s); delete those shards first, or give --force (they then go FAILED with their outputs to %s unpublished)",
					name, len(pubs), strings.Join(firstN(pubs, 5), ", "), name)
			}
			opener, err := cf.OpenWAL(hclog.NewNullLogger(), 0)
			if err != nil {
				return err
			}
			defer opener.Close()
			rm, ok := opener.(wal.ChannelRemover)
			if !ok {
				return fmt.Errorf("this WAL cannot remove channels: %w", errors.ErrUnsupported)
			}
			// Data first: a record left behind is recreated by the next
			// delete; streams left behind would greet a re-created topic.
			for p := 0; p < d.Partitions; p++ {
				if err := rm.RemoveChannel(ctx, topic.ChannelName(name, p)); err != nil {
					return err
				}
			}
			if err := topicsAt(cli, cf.EtcdPrefix).Delete(ctx, name); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted topic %s (%d partitions)\n", name, d.Partitions)
			return nil
		},
	}
	cf.Bind(cmd.Flags())
	cmd.Flags().StringVar(&name, "name", "", "topic to delete (required)")
	cmd.Flags().BoolVar(&force, "force", false, "delete even while shards read or publish to the topic")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

// firstN returns the first n of ss, with "..." when there are more.
func firstN(ss []string, n int) []string {
	if len(ss) <= n {
		return ss
	}
	return append(append([]string{}, ss[:n]...), fmt.Sprintf("... %d more", len(ss)-n))
}
