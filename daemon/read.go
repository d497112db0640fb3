package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/consumerd/consumerd/internal/ident"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// readFormats are read's output formats.
var readFormats = []string{"lines", "json"}

// ReadMessage is one line of `read -o json`. Key and payload are bytes:
// each is "key" / "payload" when valid UTF-8, else "key_b64" /
// "payload_b64" (standard base64), exactly one of each pair (see jsonBytes).
type ReadMessage struct {
	Partition  int     `json:"partition"`
	ID         uint64  `json:"id"`
	Key        *string `json:"key,omitempty"`
	KeyB64     *string `json:"key_b64,omitempty"`
	Payload    *string `json:"payload,omitempty"`
	PayloadB64 *string `json:"payload_b64,omitempty"`
}

// readStart is where read starts in each partition.
type readStart struct {
	kind string // "start", "end" or "id"
	id   message.MessageID
}

func parseReadStart(s string) (readStart, error) {
	switch s {
	case "start", "end":
		return readStart{kind: s}, nil
	}
	id, err := message.ParseMessageID(s)
	if err != nil || id == 0 {
		return readStart{}, usagef("--from: %q is not start, end or a message id (a decimal number, 1 or more)", s)
	}
	return readStart{kind: "id", id: id}, nil
}

func (r readStart) String() string {
	if r.kind == "id" {
		return "id " + r.id.String()
	}
	return r.kind
}

// policy is the scanner's start in a partition whose head is head.
func (r readStart) policy(head message.MessageID) wal.DeliverPolicy {
	switch {
	case r.kind == "id":
		return wal.DeliverStartFrom(r.id)
	case r.kind == "end" && head > 0:
		return wal.DeliverStartAfter(head)
	default: // start; or end of an empty partition: whatever comes
		return wal.DeliverAll()
	}
}

// nothingBefore reports whether a read that stops at head has nothing to
// read.
func (r readStart) nothingBefore(head message.MessageID) bool {
	return head == 0 || r.kind == "end" || (r.kind == "id" && r.id > head)
}

func newReadCommand(opts Options) *cobra.Command {
	var cf clientFlags
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
				return usagef("--topic: %v", err)
			}
			if !containsString(readFormats, output) {
				return usagef("-o: %q must be one of %s", output, strings.Join(readFormats, ", "))
			}
			start, err := parseReadStart(from)
			if err != nil {
				return err
			}
			onePartition := cmd.Flags().Changed("partition")
			if onePartition && partition < 0 {
				return usagef("--partition: %d must be 0 or more", partition)
			}
			if start.kind == "id" && !onePartition {
				return usagef("--from %s: a message id is a position in one partition; give --partition", from)
			}
			ctx := cmd.Context()
			if follow { // Ctrl-C ends a follow: a normal end, exit 0
				sigs, stop := opts.signals()
				defer stop()
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				go func() { // owned here: ends with ctx
					select {
					case <-sigs:
						cancel()
					case <-ctx.Done():
					}
				}()
			}
			cli, err := cf.etcd(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			desc, err := getTopic(ctx, cli, cf.etcdPrefix, topicName)
			if err != nil {
				return fmt.Errorf("--topic: %w", err)
			}
			parts := make([]int, 0, desc.Partitions)
			if onePartition {
				if partition >= desc.Partitions {
					return usagef("--partition: %d out of range: topic %s has %d partition(s), 0..%d", partition, topicName, desc.Partitions, desc.Partitions-1)
				}
				parts = append(parts, partition)
			} else {
				for p := 0; p < desc.Partitions; p++ {
					parts = append(parts, p)
				}
			}
			opener, err := cf.openWAL(hclog.NewNullLogger())
			if err != nil {
				return err
			}
			defer opener.Close()
			mw := newMessageWriter(cmd.OutOrStdout(), output)
			r := &reader{cf: cf, topic: topicName, start: start, out: mw}
			if err := r.open(ctx, opener, parts); err != nil {
				return err
			}
			defer r.close()
			if follow {
				err = r.follow(ctx)
				if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
					err = nil // Ctrl-C or the caller ended the follow
				}
			} else {
				err = r.toHeads(ctx)
			}
			if ferr := mw.flush(); err == nil && ferr != nil {
				err = fmt.Errorf("writing output: %w", ferr)
			}
			return err
		},
	}
	cf.bind(cmd.Flags())
	cmd.Flags().StringVar(&topicName, "topic", "", "topic to read (required)")
	cmd.Flags().IntVar(&partition, "partition", 0, "read only this partition (default: every partition)")
	cmd.Flags().StringVar(&from, "from", "start", "where to start: start, end, or a message id (with --partition)")
	cmd.Flags().BoolVar(&follow, "follow", false, "keep printing new messages until Ctrl-C, instead of stopping at the head")
	cmd.Flags().StringVarP(&output, "output", "o", "lines", "output format: lines (key<TAB>payload) or json")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

// reader is one read command's partitions (or one Client.ReadPartition's).
type reader struct {
	cf    clientFlags
	topic string
	start readStart
	out   messageSink
	parts []*readPartition
}

// messageSink is where a reader delivers messages: the read command's
// messageWriter, or a Command's callback (funcSink).
type messageSink interface {
	write(partition int, m *message.ImmutableMessage) error
	// flush is called after each message a follow delivers, so a follower
	// sees it at once.
	flush() error
}

// funcSink hands each message to fn; it buffers nothing.
type funcSink func(message.ImmutableMessage) error

func (f funcSink) write(_ int, m *message.ImmutableMessage) error { return f(*m) }
func (funcSink) flush() error                                     { return nil }

// readPartition is one partition being read.
type readPartition struct {
	index int
	w     wal.WAL
	head  message.MessageID // LastID when read started
}

// open opens every partition's WAL and takes its head, each bounded by
// --dial-timeout.
func (r *reader) open(ctx context.Context, opener wal.Opener, parts []int) error {
	for _, i := range parts {
		ch := topic.ChannelName(r.topic, i)
		octx, cancel := context.WithTimeout(ctx, r.cf.dialTimeout)
		w, err := opener.Open(octx, &wal.OpenOption{Channel: ch})
		if err != nil {
			cancel()
			return fmt.Errorf("opening topic %s partition %d (NATS at %s): %w", r.topic, i, r.cf.walURL, err)
		}
		head, err := w.LastID(octx)
		cancel()
		if err != nil {
			w.Close()
			return fmt.Errorf("topic %s partition %d: reading its last id (NATS at %s): %w", r.topic, i, r.cf.walURL, err)
		}
		r.parts = append(r.parts, &readPartition{index: i, w: w, head: head})
	}
	return nil
}

func (r *reader) close() {
	for _, p := range r.parts {
		p.w.Close()
	}
}

// scan opens p's scanner at r.start.
func (r *reader) scan(ctx context.Context, p *readPartition) (wal.Scanner, error) {
	sc, err := p.w.Read(ctx, wal.ReadOption{Name: "consumerd-read", DeliverPolicy: r.start.policy(p.head)})
	if err != nil {
		return nil, fmt.Errorf("reading topic %s partition %d from %s: %w", r.topic, p.index, r.start, err)
	}
	return sc, nil
}

// stopped is the error of a scanner whose channel closed.
func (r *reader) stopped(p *readPartition, sc wal.Scanner) error {
	<-sc.Done()
	return fmt.Errorf("reading topic %s partition %d: %w", r.topic, p.index, sc.Error())
}

// toHeads reads each partition in order up to its head.
func (r *reader) toHeads(ctx context.Context) error {
	for _, p := range r.parts {
		if r.start.nothingBefore(p.head) {
			continue
		}
		if err := r.toHead(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

func (r *reader) toHead(ctx context.Context, p *readPartition) error {
	sc, err := r.scan(ctx, p)
	if err != nil {
		return err
	}
	defer sc.Close()
	for {
		select {
		case m, ok := <-sc.Chan():
			if !ok {
				return r.stopped(p, sc)
			}
			if err := r.out.write(p.index, &m); err != nil {
				return err
			}
			if m.ID >= p.head {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("reading topic %s partition %d: %w", r.topic, p.index, ctx.Err())
		}
	}
}

// follow prints every partition's messages as they arrive until ctx ends
// (nil) or a scanner fails.
func (r *reader) follow(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	type arrival struct {
		p int
		m message.ImmutableMessage
	}
	arrivals := make(chan arrival)
	failed := make(chan error, len(r.parts))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs first: the relays end with ctx
	for _, p := range r.parts {
		sc, err := r.scan(ctx, p)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() { // owned here: relays p's messages until ctx ends or the scanner stops
			defer wg.Done()
			defer sc.Close()
			for {
				select {
				case m, ok := <-sc.Chan():
					if !ok {
						failed <- r.stopped(p, sc)
						return
					}
					select {
					case arrivals <- arrival{p.index, m}:
					case <-ctx.Done():
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for {
		select {
		case a := <-arrivals:
			if err := r.out.write(a.p, &a.m); err != nil {
				return err
			}
			if err := r.out.flush(); err != nil { // a follower sees each message at once
				return fmt.Errorf("writing output: %w", err)
			}
		case err := <-failed:
			if ctx.Err() != nil {
				return nil
			}
			return err
		case <-ctx.Done():
			return nil
		}
	}
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
		rm := ReadMessage{Partition: partition, ID: uint64(m.ID)}
		rm.Key, rm.KeyB64 = jsonBytes(m.Key)
		rm.Payload, rm.PayloadB64 = jsonBytes(string(m.Payload))
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
