package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/internal/ident"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// maxInFlight bounds the lines read and not yet acknowledged (or failed):
// what a failed run leaves unknown, and the memory the run holds. It stays
// at the JetStream backend's MaxPending (4000 appends per connection).
const maxInFlight = 4000

// maxLine bounds one input line: NATS's own ceiling on max_payload.
const maxLine = 64 << 20

// publishFormats are publish's input formats.
var publishFormats = []string{"lines", "kv", "json"}

// lineParser turns one input line into a message's key and payload.
type lineParser func(line []byte) (key string, payload []byte, err error)

func parserFor(format, keyField string) lineParser {
	switch format {
	case "kv":
		return func(line []byte) (string, []byte, error) {
			k, v, ok := bytes.Cut(line, []byte{'\t'})
			if !ok {
				return "", nil, errors.New("no TAB between key and payload (--format kv wants key<TAB>payload)")
			}
			return string(k), v, nil
		}
	case "json":
		return func(line []byte) (string, []byte, error) {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(line, &obj); err != nil {
				return "", nil, fmt.Errorf("not a JSON object: %w", err)
			}
			raw, ok := obj[keyField]
			if !ok {
				return "", nil, fmt.Errorf("no field %q (--key-field) in the object", keyField)
			}
			switch raw[0] {
			case '"':
				var s string
				if err := json.Unmarshal(raw, &s); err != nil {
					return "", nil, fmt.Errorf("field %q: %w", keyField, err)
				}
				return s, line, nil
			case '{', '[', 'n':
				return "", nil, fmt.Errorf("field %q is %s; want a string, number or boolean", keyField, raw)
			default: // a number or a boolean: its JSON text
				return string(raw), line, nil
			}
		}
	default: // lines: the line is its own key
		return func(line []byte) (string, []byte, error) { return string(line), line, nil }
	}
}

func newPublishCommand(prog cmdline.Program) *cobra.Command {
	var cf connect.ClientFlags
	var topicName, format, keyField, runID string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "publish --topic T [--format lines|kv|json] [--key-field F] [--id RUN] [--timeout D]",
		Short: "Publish stdin to a topic, one message per line",
		Long: `publish reads stdin and appends each non-empty line as one message to topic T,
routed to partition hash(key) mod N, N being T's partition count (consumerd
topics create). --format says what a line is:
  lines   the line is the payload and the key (default)
  kv      key<TAB>payload
  json    a JSON object, published as is; the key is its field --key-field
          (default "key": a string, or the text of a number or boolean)
A message (key, unless it equals the payload, plus payload) must fit the NATS
server's max_payload (1 MiB by default): a larger one fails, naming its line.
Every message carries a dedupe id, RUN/<line number>; without --id, RUN is
random. Through a NATS restart or a leader change publish waits and resends
what was not acknowledged, in order per partition, and no line is stored twice
(the stream drops a dedupe id it has seen within its duplicate window, 2
minutes). It gives up only when --timeout passes: exit 1, saying how many
lines are known stored and the run id; re-running the same input with
--id RUN within the duplicate window then stores only what is missing. The
run also stops at the first bad line or refused message (exit 1, naming the
line).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := ident.Check(topicName); err != nil {
				return cmdline.Usagef("--topic: %v", err)
			}
			if !cmdline.OneOf(publishFormats, format) {
				return cmdline.Usagef("--format: %q must be one of %s", format, strings.Join(publishFormats, ", "))
			}
			if cmd.Flags().Changed("key-field") && format != "json" {
				return cmdline.Usagef("--key-field: only with --format json")
			}
			if keyField == "" {
				return cmdline.Usagef("--key-field: must not be empty")
			}
			if timeout <= 0 {
				return cmdline.Usagef("--timeout: %s must be positive", timeout)
			}
			if runID != "" {
				if err := ident.Check(runID); err != nil {
					return cmdline.Usagef("--id: %v", err)
				}
			} else {
				var b [8]byte
				_, _ = rand.Read(b[:])
				runID = hex.EncodeToString(b[:])
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			p := &publishRun{cf: cf, topic: topicName, runID: runID, parse: parserFor(format, keyField), timeout: timeout}
			return p.run(ctx, cmd)
		},
	}
	cf.Bind(cmd.Flags())
	cmd.Flags().StringVar(&topicName, "topic", "", "topic to publish to (required)")
	cmd.Flags().StringVar(&format, "format", "lines", "input format: lines, kv (key<TAB>payload) or json")
	cmd.Flags().StringVar(&keyField, "key-field", "key", "with --format json: the field holding the key")
	cmd.Flags().StringVar(&runID, "id", "", "run id: dedupe ids are RUN/<line>, so re-running the same input stores nothing twice")
	cmd.Flags().DurationVar(&timeout, "timeout", 60*time.Second, "bound on the whole run")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

// publishRun is one publish command's run.
type publishRun struct {
	cf      connect.ClientFlags
	topic   string
	runID   string
	parse   lineParser
	timeout time.Duration

	mu       sync.Mutex
	firstErr error
	acked    int
}

func (p *publishRun) fail(err error) {
	p.mu.Lock()
	if p.firstErr == nil {
		p.firstErr = err
	}
	p.mu.Unlock()
}

func (p *publishRun) failed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.firstErr != nil
}

func (p *publishRun) run(ctx context.Context, cmd *cobra.Command) error {
	cli, err := p.cf.Etcd(ctx)
	if err != nil {
		return p.timedOut(ctx, err)
	}
	defer cli.Close()
	desc, err := topicsAt(cli, p.cf.EtcdPrefix).Get(ctx, p.topic)
	if err != nil {
		return p.timedOut(ctx, fmt.Errorf("--topic: %w", err))
	}
	opener, err := p.cf.OpenWAL(hclog.NewNullLogger(), time.Until(cmdline.DeadlineOf(ctx)))
	if err != nil {
		return p.timedOut(ctx, err)
	}
	pub := topic.NewPublisher(opener, hclog.NewNullLogger())
	defer cmdline.CloseBy(ctx, func() { pub.Close(); opener.Close() })

	var wg sync.WaitGroup
	sem := make(chan struct{}, maxInFlight)
	sc := bufio.NewScanner(cmd.InOrStdin())
	sc.Buffer(make([]byte, 64*1024), maxLine)
	line, sent := 0, 0
	var stalled error // the deadline passed while waiting for room in flight
	for sc.Scan() && !p.failed() {
		line++
		text := sc.Bytes()
		if len(text) == 0 {
			continue
		}
		key, payload, err := p.parse(text)
		if err != nil {
			p.fail(fmt.Errorf("line %d: %w", line, err))
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			// Reported after the appends in flight: their errors say why.
			stalled = fmt.Errorf("line %d: waiting for one of %d unacknowledged lines: %w", line, maxInFlight, ctx.Err())
		}
		if stalled != nil || p.failed() {
			break
		}
		wg.Add(1)
		sent++
		n := line
		msg := message.MutableMessage{Key: key, Payload: bytes.Clone(payload), DedupeID: fmt.Sprintf("%s/%d", p.runID, n)}
		pub.PublishAsync(ctx, desc, msg, func(_ topic.Partition, _ message.MessageID, err error) {
			if err != nil {
				p.fail(fmt.Errorf("line %d: %w", n, err))
			} else {
				p.mu.Lock()
				p.acked++
				p.mu.Unlock()
			}
			<-sem
			wg.Done()
		})
	}
	if err := sc.Err(); err != nil && !p.failed() {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("longer than %d MiB", maxLine>>20)
		}
		p.fail(fmt.Errorf("reading stdin at line %d: %w", line+1, err))
	}
	if !cmdline.WaitBy(ctx, wg.Wait) {
		p.fail(fmt.Errorf("appends still unacknowledged: %w", ctx.Err()))
	}
	if stalled != nil {
		p.fail(stalled)
	}
	p.mu.Lock() // appends abandoned at the deadline may still report
	firstErr, acked := p.firstErr, p.acked
	p.mu.Unlock()
	if firstErr != nil {
		return p.timedOut(ctx, fmt.Errorf("publishing to topic %s: %w\n%s", p.topic, firstErr, p.rerunHint(acked, sent)))
	}
	fmt.Fprintf(cmd.OutOrStdout(), "published %d messages to topic %s (%d partitions)\n", acked, p.topic, desc.Partitions)
	return nil
}

// rerunHint says what a failed run stored and how to finish it without
// storing a line twice: its run id, as --id, within the duplicate window.
func (p *publishRun) rerunHint(acked, sent int) string {
	return fmt.Sprintf("%d of %d lines sent are known stored (the others may be); re-run the same input with --id %s "+
		"within %s (the streams' duplicate window) to store only what is missing",
		acked, sent, p.runID, jetstream.DefaultDuplicateWindow)
}

// timedOut says so when the run's --timeout is why err happened.
func (p *publishRun) timedOut(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("--timeout %s passed (is NATS at %s up?): %w", p.timeout, p.cf.WALURL, err)
	}
	return err
}
