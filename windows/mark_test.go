package windows

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
)

// TestMarks runs testdata/marks:
//
//	markof                   each input line a MarkProperty value -> the mark or the error
//	markof none              a data message (no MarkProperty) -> not a mark
//	markof empty             a MarkProperty with an empty value
//	message mark=S/N/T       Mark.Message, and MarkOf of it read back
//	broadcast topic=T partitions=N mark=S/N/T [fail-at=P] [no-topic]
//	                         what Broadcast stages, or its error
func TestMarks(t *testing.T) {
	datadriven.RunTest(t, "testdata/marks", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "markof":
			if d.HasArg("none") {
				return showMarkOf(message.ImmutableMessage{Payload: []byte("17"), Properties: map[string]string{"other": "1/2/3"}})
			}
			if d.HasArg("empty") {
				d.Input = "" // a property with an empty value
			}
			var b strings.Builder
			for _, v := range strings.Split(d.Input, "\n") {
				msg := message.ImmutableMessage{Channel: "in/0001", ID: 7, Properties: map[string]string{MarkProperty: v}}
				fmt.Fprintf(&b, "%q: %s", v, showMarkOf(msg))
			}
			return b.String()
		case "message":
			m := scanMark(t, d)
			msg := m.Message()
			var b strings.Builder
			fmt.Fprintf(&b, "key=%q payload=%q properties=%v\n", msg.Key, msg.Payload, msg.Properties)
			b.WriteString("read back: " + showMarkOf(message.ImmutableMessage{Key: msg.Key, Payload: msg.Payload, Properties: msg.Properties}))
			return b.String()
		case "broadcast":
			var name string
			var parts int
			d.ScanArgs(t, "topic", &name)
			d.ScanArgs(t, "partitions", &parts)
			pub := &recordingPublisher{partitions: map[string]int{name: parts}, failAt: -1}
			d.MaybeScanArgs(t, "fail-at", &pub.failAt)
			if d.HasArg("no-topic") {
				delete(pub.partitions, name)
			}
			if err := Broadcast(pub, name, scanMark(t, d)); err != nil {
				return pub.String() + "error: " + err.Error() + "\n"
			}
			return pub.String()
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

// scanMark reads the mark=S/N/T argument (T may be min or max).
func scanMark(t *testing.T, d *datadriven.TestData) Mark {
	var s string
	d.ScanArgs(t, "mark", &s)
	m, err := parseTestMark(s)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	return m
}

// parseTestMark reads "S/N/T", T being a time as parseTime reads it.
func parseTestMark(s string) (Mark, error) {
	var m Mark
	f := strings.Split(s, "/")
	if len(f) != 3 {
		return m, fmt.Errorf("mark %q: want S/N/T", s)
	}
	if _, err := fmt.Sscan(f[0]+" "+f[1], &m.Sender, &m.Senders); err != nil {
		return m, fmt.Errorf("mark %q: %w", s, err)
	}
	var err error
	m.Time, err = parseTime(f[2])
	return m, err
}

func showMarkOf(msg message.ImmutableMessage) string {
	m, ok, err := MarkOf(msg)
	switch {
	case err != nil:
		return fmt.Sprintf("error: %v (ok=%v)\n", err, ok)
	case !ok:
		return "not a mark\n"
	}
	return fmt.Sprintf("sender %d of %d, time %s\n", m.Sender, m.Senders, fmtTime(m.Time))
}

// recordingPublisher records what is staged; it fails PublishTo of
// partition failAt, and Partitions of a topic it does not know.
type recordingPublisher struct {
	partitions map[string]int
	failAt     int
	staged     []string
}

func (p *recordingPublisher) Publish(topicName string, msg message.MutableMessage) error {
	n, err := p.Partitions(topicName)
	if err != nil {
		return err
	}
	return p.PublishTo(topic.Partition{Topic: topicName, Index: topic.PartitionFor(msg.Key, n)}, msg)
}

func (p *recordingPublisher) PublishTo(part topic.Partition, msg message.MutableMessage) error {
	if part.Index == p.failAt {
		return errors.New("outbox is full")
	}
	keys := make([]string, 0, len(msg.Properties))
	for k, v := range msg.Properties {
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	p.staged = append(p.staged, fmt.Sprintf("%s key=%q payload=%q %s", part, msg.Key, msg.Payload, strings.Join(keys, " ")))
	return nil
}

func (p *recordingPublisher) Partitions(topicName string) (int, error) {
	n, ok := p.partitions[topicName]
	if !ok {
		return 0, fmt.Errorf("topic %s: not found", topicName)
	}
	return n, nil
}

func (p *recordingPublisher) String() string {
	if len(p.staged) == 0 {
		return "(nothing staged)\n"
	}
	return strings.Join(p.staged, "\n") + "\n"
}
