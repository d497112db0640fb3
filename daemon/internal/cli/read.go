package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/internal/ident"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
)

// readFormats are read's output formats.
var readFormats = []string{"lines", "json"}

func newReadCommand(prog cmdline.Program) *cobra.Command {
	var cf connect.ClientFlags
	var topicName, from, output string
	var partition int
	var follow bool
	cmd := &cobra.Command{
		Use:   "read --topic T [--partition P] [--from start|end|ID] [--follow] [-o lines|json]",
		Short: "Print a topic's messages up to its head, or as they come with --follow",
		Long: `read prints the messages of topic T (every partition, or only --partition P).
It stops at the head, the last message each partition held when read started,
unless --follow: then it keeps printing new messages until Ctrl-C (exit 0).
Without --partition it reads partition 0 to its head, then 1, and so on; with
--follow the partitions' messages are interleaved as they arrive.
  --from start   from each partition's oldest message (default)
  --from end     only messages after the head (so, with --follow, new ones)
  --from ID      from message id ID of --partition P, inclusive (ids are per
                 partition: -o json shows them)
-o says how a message is printed:
  lines   key<TAB>payload, one per line, both as their raw bytes: what
          'publish --format kv' reads back. A key or payload holding a TAB
          or a newline, or bytes that are not UTF-8, is ambiguous here;
          -o json shows every byte exactly.
  json    one object per line: {"partition","id","key","payload"}, with
          "key_b64" instead of "key" (likewise "payload_b64") when the bytes
          are not valid UTF-8: standard base64, as 'base64 -d' reads.
The topic must exist (consumerd topics create). Reaching etcd and NATS is
bounded by --dial-timeout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := ident.Check(topicName); err != nil {
				return cmdline.Usagef("--topic: %v", err)
			}
			if !cmdline.OneOf(readFormats, output) {
				return cmdline.Usagef("-o: %q must be one of %s", output, strings.Join(readFormats, ", "))
			}
			start, err := topic.ParseStart(from)
			if err != nil {
				return cmdline.Usagef("--from: %v", err)
			}
			onePartition := cmd.Flags().Changed("partition")
			if onePartition && partition < 0 {
				return cmdline.Usagef("--partition: %d must be 0 or more", partition)
			}
			if start.IsID() && !onePartition {
				return cmdline.Usagef("--from %s: a message id is a position in one partition; give --partition", from)
			}
			ctx := cmd.Context()
			if follow { // Ctrl-C ends a follow: a normal end, exit 0
				var stop func()
				ctx, stop = cancelOnSignal(ctx, prog)
				defer stop()
			}
			return readTopic(ctx, &cf, topicName, partition, onePartition, start, follow, newMessageWriter(cmd.OutOrStdout(), output))
		},
	}
	cf.Bind(cmd.Flags())
	cmd.Flags().StringVar(&topicName, "topic", "", "topic to read (required)")
	cmd.Flags().IntVar(&partition, "partition", 0, "read only this partition (default: every partition)")
	cmd.Flags().StringVar(&from, "from", "start", "where to start: start, end, or a message id (with --partition)")
	cmd.Flags().BoolVar(&follow, "follow", false, "keep printing new messages until Ctrl-C, instead of stopping at the head")
	cmd.Flags().StringVarP(&output, "output", "o", "lines", "output format: lines (key<TAB>payload) or json")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

// messageWriter prints messages in one of readFormats.
type messageWriter struct {
	w    *bufio.Writer
	json bool
	enc  *json.Encoder
}

func newMessageWriter(w io.Writer, format string) *messageWriter {
	mw := &messageWriter{w: bufio.NewWriterSize(w, 64<<10), json: format == "json"}
	mw.enc = json.NewEncoder(mw.w)
	mw.enc.SetEscapeHTML(false)
	return mw
}

func (mw *messageWriter) write(partition int, m *message.ImmutableMessage) error {
	if mw.json {
		rm := api.ReadMessage{Partition: partition, ID: uint64(m.ID)}
		rm.Key, rm.KeyB64 = api.EncodeBytes(m.Key)
		rm.Payload, rm.PayloadB64 = api.EncodeBytes(string(m.Payload))
		if err := mw.enc.Encode(rm); err != nil {
			return fmt.Errorf("writing output: %w", err)
		}
		return nil
	}
	_, _ = mw.w.WriteString(m.Key)
	_ = mw.w.WriteByte('\t')
	_, _ = mw.w.Write(m.Payload)
	if err := mw.w.WriteByte('\n'); err != nil {
		return fmt.Errorf("writing output: %w", err)
	}
	return nil
}

func (mw *messageWriter) flush() error { return mw.w.Flush() }

// flushOutput flushes after each message a follow delivers.
func (mw *messageWriter) flushOutput() error {
	if err := mw.w.Flush(); err != nil {
		return fmt.Errorf("writing output: %w", err)
	}
	return nil
}

// cancelOnSignal is ctx, cancelled on prog's first shutdown signal; stop
// releases the signal and the goroutine that waits for it.
func cancelOnSignal(ctx context.Context, prog cmdline.Program) (context.Context, func()) {
	sigs, stopSignals := prog.NotifySignals()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // owned here: ends with ctx
		defer close(done)
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(); <-done; stopSignals() }
}

// readTopic prints topic name's partitions (or only partition, when one)
// from start to mw: up to their heads, or as messages arrive when follow.
func readTopic(ctx context.Context, cf *connect.ClientFlags, name string, partition int, one bool, start topic.Start, follow bool, mw *messageWriter) error {
	cli, err := cf.Etcd(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	desc, err := topicsAt(cli, cf.EtcdPrefix).Get(ctx, name)
	if err != nil {
		return fmt.Errorf("--topic: %w", err)
	}
	parts := make([]int, 0, desc.Partitions)
	if one {
		if partition >= desc.Partitions {
			return cmdline.Usagef("--partition: %d out of range: topic %s has %d partition(s), 0..%d", partition, name, desc.Partitions, desc.Partitions-1)
		}
		parts = append(parts, partition)
	} else {
		for p := 0; p < desc.Partitions; p++ {
			parts = append(parts, p)
		}
	}
	opener, err := cf.OpenWAL(hclog.NewNullLogger(), 0)
	if err != nil {
		return err
	}
	defer opener.Close()
	r, err := topic.OpenReader(ctx, topic.ReaderConfig{
		Opener: opener, Topic: name, Partitions: parts, Start: start,
		OpenTimeout: cf.DialTimeout, Server: "NATS at " + cf.WALURL,
		Deliver: mw.write, Flush: mw.flushOutput,
	})
	if err != nil {
		return err
	}
	defer r.Close()
	if follow {
		err = r.Follow(ctx)
		if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
			err = nil // Ctrl-C or the caller ended the follow
		}
	} else {
		err = r.ToHeads(ctx)
	}
	if ferr := mw.flush(); err == nil && ferr != nil {
		err = fmt.Errorf("writing output: %w", ferr)
	}
	return err
}
