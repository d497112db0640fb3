package daemon

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/consumerd/consumerd/internal/ident"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
)

// maxInFlight bounds the publishes awaiting their acknowledgement.
const maxInFlight = 1024

func newPublishCommand(opts Options) *cobra.Command {
	var cf clientFlags
	var topicName string
	cmd := &cobra.Command{
		Use:   "publish --topic T",
		Short: "Publish stdin to a topic, one message per line (key = the line)",
		Long: `publish reads stdin and appends each non-empty line as one message to topic T;
the message key is the line, so equal lines go to the same partition. T's
partition count is taken from the shard specs (1 + the highest partition any
shard reads from T); it is an error when no shard consumes T. Every message
carries a dedupe id, so the WAL's retries never store a line twice.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := ident.Check(topicName); err != nil {
				return usagef("--topic: %v", err)
			}
			ctx := cmd.Context()
			cli, snap, err := cf.snapshot(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			parts := shard.TopicPartitions(shard.Specs(snap))
			n := parts[topicName]
			if n == 0 {
				known := make([]string, 0, len(parts))
				for t := range parts {
					known = append(known, t)
				}
				sort.Strings(known)
				return fmt.Errorf("--topic: no shard consumes topic %q (topics with shards: %s)", topicName, orDash(strings.Join(known, ", ")))
			}
			opener, err := openWAL(cf.walURL, 1, cf.dialTimeout, hclog.NewNullLogger())
			if err != nil {
				return err
			}
			defer opener.Close()
			pub := topic.NewPublisher(opener, hclog.NewNullLogger())
			defer pub.Close()

			desc := topic.Description{Name: topicName, Partitions: n}
			var runID [8]byte
			_, _ = rand.Read(runID[:])
			run := hex.EncodeToString(runID[:])

			var (
				wg       sync.WaitGroup
				mu       sync.Mutex
				firstErr error
				acked    int
			)
			sem := make(chan struct{}, maxInFlight)
			sc := bufio.NewScanner(cmd.InOrStdin())
			sc.Buffer(make([]byte, 64*1024), 1<<20)
			line := 0
			for sc.Scan() {
				text := sc.Text()
				line++
				if text == "" {
					continue
				}
				mu.Lock()
				stop := firstErr != nil
				mu.Unlock()
				if stop {
					break
				}
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					return ctx.Err()
				}
				wg.Add(1)
				msg := message.MutableMessage{Key: text, Payload: []byte(text), DedupeID: fmt.Sprintf("%s-%d", run, line)}
				pub.PublishAsync(ctx, desc, msg, func(_ topic.Partition, _ message.MessageID, err error) {
					mu.Lock()
					if err != nil && firstErr == nil {
						firstErr = err
					}
					if err == nil {
						acked++
					}
					mu.Unlock()
					<-sem
					wg.Done()
				})
			}
			wg.Wait()
			if err := sc.Err(); err != nil {
				return fmt.Errorf("reading stdin at line %d: %w", line+1, err)
			}
			if firstErr != nil {
				return fmt.Errorf("publishing to topic %s: %w (%d messages acknowledged before)", topicName, firstErr, acked)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "published %d messages to topic %s (%d partitions)\n", acked, topicName, n)
			return nil
		},
	}
	cf.bind(cmd.Flags())
	cmd.Flags().StringVar(&topicName, "topic", "", "topic to publish to (required)")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}
