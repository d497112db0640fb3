package windows_test

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/windows"
)

// The example app is a two-stage tumbling-window count. Stage one
// (CountName) reads events, each payload a decimal event time, counts them
// per window of its partition, and sends each complete window's partial
// count to partials, keyed by the window, followed by a watermark mark.
// Stage two (TotalName) sums the partials of each window from every stage
// one shard and emits the total once every sender's mark covers the window.
const (
	Events   = "events"
	Partials = "partials"
	Totals   = "totals"

	CountName = "tumblecount"
	TotalName = "tumbletotal"

	// WindowSize is the tumbling window length, ms.
	WindowSize = 10
)

// Keys of the app's state.
var (
	trackerPrefix = []byte("wm/") // the Tracker's inputs
	timerPrefix   = []byte("tm/") // a timer per open window, key: its start
	countPrefix   = "c/"          // + window start: the window's count so far
	lateKey       = []byte("late")
)

// CountApp is stage one: events -> partials.
func CountApp() shard.App {
	return shard.App{
		Name: CountName, Topics: []string{Events}, Outputs: []string{Partials},
		NewConsumer: func() shard.Consumer {
			return &windowCount{
				tracker: windows.NewTracker(trackerPrefix, 0), // events: timed, in order
				timers:  windows.NewTimers(timerPrefix),
				decode:  decodeEvent, output: Partials, marksFrom: Events,
			}
		},
	}
}

// TotalApp is stage two: partials -> totals.
func TotalApp() shard.App {
	return shard.App{
		Name: TotalName, Topics: []string{Partials}, Outputs: []string{Totals},
		NewConsumer: func() shard.Consumer {
			return &windowCount{
				tracker: windows.NewTracker(trackerPrefix, 0, Partials), // marked
				timers:  windows.NewTimers(timerPrefix),
				decode:  decodePartial, output: Totals,
			}
		},
	}
}

// windowCount sums a count per tumbling window and emits each window's sum
// to output once the watermark completes it.
type windowCount struct {
	tracker *windows.Tracker
	timers  *windows.Timers
	// decode reads a data message: an event time in the window, and the
	// count it adds.
	decode func(msg message.ImmutableMessage) (ts, n int64, err error)
	output string
	// marksFrom, when set, is the source topic whose partitions number the
	// senders: the consumer broadcasts its watermark to output.
	marksFrom string
}

// InitShard loads the watermark and the timers: the Database now holds
// every committed transaction.
func (c *windowCount) InitShard(s shard.Shard) error {
	if err := c.tracker.Load(s); err != nil {
		return err
	}
	return c.timers.Load(s.Database(), s.ReadOptions())
}

// Consume applies a mark to the watermark, or adds a data message's count
// to its window and makes sure the window's timer is set.
func (c *windowCount) Consume(s shard.Shard, env topic.Envelope, _ shard.Publisher) error {
	if m, ok, err := windows.MarkOf(env.Message); err != nil {
		return err
	} else if ok {
		return c.tracker.ObserveMark(env.Partition, m)
	}
	ts, n, err := c.decode(env.Message)
	if err != nil {
		return fmt.Errorf("%s message %d: %w", env.Partition, env.Message.ID, err)
	}
	c.tracker.Observe(env.Partition, ts)
	w := windows.Tumble(ts, WindowSize)
	txn := s.Transaction()
	if w.MaxTimestamp() <= c.tracker.Flushed() {
		// The window fired already: count the message instead of emitting
		// a second, wrong result for it.
		return addCount(s, lateKey, n)
	}
	start := startKey(w.Start)
	if err := addCount(s, countKey(start), n); err != nil {
		return err
	}
	c.timers.Set(txn, w.MaxTimestamp(), start)
	return nil
}

// Flush emits every window the watermark completed, then the watermark
// itself, in that order: downstream sees a window's result before the mark
// that covers it.
func (c *windowCount) Flush(s shard.Shard, pub shard.Publisher) error {
	txn := s.Transaction()
	wm := c.tracker.Current()
	err := c.timers.Due(txn, wm, func(_ int64, start []byte) error {
		n, err := getCount(s, countKey(start))
		if err != nil {
			return err
		}
		txn.Delete(countKey(start))
		ws := strconv.FormatInt(int64(binary.BigEndian.Uint64(start)^1<<63), 10)
		return pub.Publish(c.output, message.MutableMessage{Key: ws, Payload: []byte(ws + " " + strconv.FormatInt(n, 10))})
	})
	if err != nil {
		return err
	}
	if c.marksFrom != "" && wm > c.tracker.Flushed() {
		senders, err := pub.Partitions(c.marksFrom)
		if err != nil {
			return err
		}
		if err := windows.Broadcast(pub, c.output, windows.Mark{Sender: s.Partition(), Senders: senders, Time: wm}); err != nil {
			return err
		}
	}
	c.tracker.Flush(txn)
	return nil
}

// decodeEvent reads an event: its payload is its decimal event time.
func decodeEvent(msg message.ImmutableMessage) (int64, int64, error) {
	ts, err := strconv.ParseInt(string(msg.Payload), 10, 64)
	return ts, 1, err
}

// decodePartial reads a partial count, "<window start> <count>".
func decodePartial(msg message.ImmutableMessage) (int64, int64, error) {
	return ParseResult(msg.Payload)
}

// ParseResult reads an output payload, "<window start> <count>".
func ParseResult(p []byte) (start, n int64, err error) {
	f := strings.Fields(string(p))
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("result %q: want <start> <count>", p)
	}
	if start, err = strconv.ParseInt(f[0], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("result %q: %w", p, err)
	}
	if n, err = strconv.ParseInt(f[1], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("result %q: %w", p, err)
	}
	return start, n, nil
}

// startKey is a window start as a timer key: big-endian with the sign bit
// flipped, so keys sort as times do.
func startKey(start int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(start)^1<<63)
}

func countKey(start []byte) []byte { return append([]byte(countPrefix), start...) }

// getCount reads a count as of the open transaction (0 if absent).
func getCount(s shard.Shard, key []byte) (int64, error) {
	v, err := s.Get(key)
	if err != nil || v == nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stored count %q at %q: %w", v, key, err)
	}
	return n, nil
}

func addCount(s shard.Shard, key []byte, n int64) error {
	cur, err := getCount(s, key)
	if err != nil {
		return err
	}
	s.Transaction().Put(key, strconv.AppendInt(nil, cur+n, 10))
	return nil
}

// Example registers the two stages of a windowed count; see windowCount
// for the Consume/Flush pattern and TestTumblingCountThroughFailover for a
// run through a failover.
func Example() {
	for _, app := range []shard.App{CountApp(), TotalApp()} {
		if err := app.Validate(); err != nil {
			fmt.Println(err)
		}
		fmt.Printf("%s: %v -> %v\n", app.Name, app.Topics, app.Outputs)
	}
	// Output:
	// tumblecount: [events] -> [partials]
	// tumbletotal: [partials] -> [totals]
}
