package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/consumerd/consumerd/examples/pipeline"
	"github.com/consumerd/consumerd/shard"
)

// Faults that lose data a stream held (Kind.loses): the nemesis removes
// it underneath consumerd, the shard reading it must stop FAILED saying so
// (never skip silently), and the heal is the operator's acceptance.

// pipelinePartitions is the partition count of the pipeline's topics.
const pipelinePartitions = 4

// inputChannel is partition i of the pipeline's input topic.
func inputChannel(i int) string { return fmt.Sprintf("%s/%04d", pipeline.Lines, i) }

// inputShard is the shard reading partition i of the input (`shards create
// --app split` names shard i so).
func inputShard(i int) string { return fmt.Sprintf("%s-%04d", pipeline.SplitName, i) }

// lostSourceWait bounds the wait for a shard to go FAILED for a lost source.
const lostSourceWait = time.Minute

// removeStream deletes channel's stream from the client host, as an
// operator's `nats stream rm`.
func (c *cluster) removeStream(ctx context.Context, channel string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := c.net.command(ctx, "c", c.bins.StreamRm, "--url", c.natsURLs(), "--channel", channel)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("removing the stream of %s: %w: %s", channel, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// acceptLostSource waits until shardID's primary is FAILED because its
// source lost messages (a shard that skipped them silently stays PRIMARY:
// an anomaly), then accepts the loss from the start of what the stream
// holds now: the lines published since it was created again.
func (c *cluster) acceptLostSource(ctx context.Context, shardID string) error {
	problems := c.poll(ctx, lostSourceWait, func(ctx context.Context) []string {
		rows, err := c.shards(ctx)
		if err != nil {
			return []string{err.Error()}
		}
		return lostSourceProblem(rows, shardID)
	})
	if problems != nil {
		return fmt.Errorf("%s did not go FAILED for its lost source within %s (a silent skip?): %s", shardID, lostSourceWait, strings.Join(problems, "; "))
	}
	_, err := c.client(ctx, 30*time.Second, nil, "shards", "accept-source", "--shard", shardID, "--from", "start", "--yes")
	return err
}

// lostSourceProblem is nil when rows show shardID FAILED because a source
// lost messages, else what they show.
func lostSourceProblem(rows []shardRow, shardID string) []string {
	for _, r := range rows {
		if r.ID != shardID {
			continue
		}
		for _, rep := range r.Replicas {
			if rep.State == "FAILED" && strings.Contains(rep.Error, shard.ErrSourceLost.Error()) {
				return nil
			}
		}
		return []string{fmt.Sprintf("shard %s is %s %s", r.ID, r.Status, r.Error)}
	}
	return []string{"no shard " + shardID}
}

// runLossFault runs a fault that loses stream data: inject it (the stream
// goes), publish the batch (which creates the stream again), heal (accept
// the loss), and measure how long after the heal the counts are exact.
func (c *cluster) runLossFault(ctx context.Context, cfg Config, f Fault, batch int, lines *[]string) FaultResult {
	res := FaultResult{Fault: f}
	heal, err := c.inject(ctx, f)
	if err != nil {
		res.Anomalies = append(res.Anomalies, fmt.Sprintf("injecting: %v", err))
		return res
	}
	b := batchLines(batch, cfg.BatchLines)
	if err := c.publishBatch(ctx, cfg.Seed, batch, b, cfg.Logf); err != nil {
		res.Anomalies = append(res.Anomalies, fmt.Sprintf("publishing: %v", err))
		return res
	}
	*lines = append(*lines, b...)
	if err := heal(ctx); err != nil {
		res.Anomalies = append(res.Anomalies, fmt.Sprintf("healing: %v", err))
		return res
	}
	healed := time.Now()
	if problems := c.waitExact(ctx, model(*lines), cfg.RecoverTimeout); problems != nil {
		res.Anomalies = append(res.Anomalies, fmt.Sprintf("counts not exact %s after the heal: %s", cfg.RecoverTimeout, strings.Join(problems, "; ")))
		return res
	}
	res.Recovered = time.Since(healed)
	return res
}
