package windows

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
)

// Tracker computes a shard's event-time watermark: the minimum over its
// inputs (its source partitions) of each input's watermark. The watermark W
// promises that every message still to come has event time > W, so a window
// whose MaxTimestamp is ≤ W is complete.
//
// An input is either timed or marked:
//
//   - A timed partition's messages arrive in event-time order, give or take
//     delay ms. Its watermark is maxSeen - delay - 1, maxSeen being the
//     largest event time observed there (the -1 because an event may repeat
//     the newest time: with delay 0 a watermark of maxSeen would declare a
//     window complete while events at its last millisecond are still
//     arriving). A mark on a timed partition raises its watermark to the
//     mark's Time if that is larger: a data generator ends its input with
//     Mark{Sender: 0, Senders: 1, Time: MaxTime}.
//   - A marked partition is fed by an upstream stage: its messages interleave
//     several senders, so their event times are ignored and its watermark
//     comes from marks only. It is the minimum over the senders' latest
//     marks, and MinTime until every one of Senders senders has sent one.
//
// A Tracker is used on the shard's goroutine only (like the Shard itself).
type Tracker struct {
	prefix []byte
	delay  int64
	marked map[string]bool

	inputs map[topic.Partition]*input
	order  []*input // by channel name, so Flush writes in a fixed order

	stale   bool  // an input changed since current was computed
	current int64 // the highest minimum computed: Current never decreases
	flushed int64 // Current as of the last Flush or Load
}

// input is one source partition's watermark state.
type input struct {
	part   topic.Partition
	key    []byte // timed: its state key; marked: its senders' keys' prefix
	marked bool
	dirty  bool // timed: changed since the last Flush

	// Timed partitions.
	maxSeen  int64 // the largest data event time, MinTime before any
	markTime int64 // the largest mark Time, MinTime before any

	// Marked partitions.
	senders []senderMark // one per sender; nil before the first mark
	heard   int          // senders with a mark
}

// senderMark is one upstream sender's latest mark on a marked partition.
type senderMark struct {
	time         int64
	heard, dirty bool
}

// Kinds of persisted input state, after the Tracker's prefix.
const (
	timedKind  = "t/" // + channel: "<maxSeen>/<markTime>"
	markedKind = "m/" // + channel + "/" + sender: "<senders>/<time>"
)

// NewTracker returns a Tracker whose state lives under prefix in the shard's
// database, with the given delay (ms) for timed inputs; topics named in
// marked are fed by upstream stages (their partitions are marked inputs),
// every other topic is timed. Call Load before use.
//
// prefix must be non-empty and own its key range: no other key of the app,
// and no Timers prefix, may start with it (Load reads every key under it).
// It panics on an empty prefix or a negative delay, programming errors.
func NewTracker(prefix []byte, delay int64, marked ...string) *Tracker {
	if len(prefix) == 0 {
		panic("windows.NewTracker: empty prefix (the tracker would read the whole database as its state)")
	}
	if delay < 0 {
		panic(fmt.Sprintf("windows.NewTracker: negative delay %d", delay))
	}
	t := &Tracker{prefix: bytes.Clone(prefix), delay: delay, marked: map[string]bool{}, current: MinTime, flushed: MinTime}
	for _, name := range marked {
		t.marked[name] = true
	}
	return t
}

// Load sets the inputs to the shard's sources (s.Spec().Sources) and their
// state to what earlier primaries' Flush committed. Call it from
// ShardIniter.InitShard: the Database then holds every committed
// transaction, so the new primary resumes the watermark exactly where the
// last committed transaction left it.
//
// A persisted value that does not parse is an error naming its key. State
// of a partition that is no longer a source, or that was persisted as timed
// and is now marked (or the reverse), is ignored: it describes an input the
// shard no longer has.
func (t *Tracker) Load(s shard.Shard) error {
	if err := t.load(s.Spec().Sources, s.Database(), s.ReadOptions()); err != nil {
		return fmt.Errorf("windows: load watermark of shard %s: %w", s.ID(), err)
	}
	return nil
}

// load is Load given the sources and the database.
func (t *Tracker) load(sources []shard.Source, db *grocksdb.DB, ro *grocksdb.ReadOptions) error {
	t.inputs = make(map[topic.Partition]*input, len(sources))
	t.order = t.order[:0]
	for _, src := range sources {
		part := topic.Partition{Topic: src.Topic, Index: src.Partition}
		in := &input{part: part, marked: t.marked[src.Topic], maxSeen: MinTime, markTime: MinTime}
		kind := timedKind
		if in.marked {
			kind = markedKind
		}
		in.key = append(append(bytes.Clone(t.prefix), kind...), part.Channel()...)
		t.inputs[part] = in
		t.order = append(t.order, in)
	}
	sort.Slice(t.order, func(i, j int) bool { return bytes.Compare(t.order[i].key, t.order[j].key) < 0 })

	it := db.NewIterator(ro)
	defer it.Close()
	for it.Seek(t.prefix); it.ValidForPrefix(t.prefix); it.Next() {
		k, v := it.Key(), it.Value()
		err := t.restore(k.Data(), v.Data())
		k.Free()
		v.Free()
		if err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read state under prefix %q: %w", t.prefix, err)
	}
	t.stale, t.current = true, MinTime
	t.flushed = t.Current()
	return nil
}

// restore applies one persisted key/value to the inputs.
func (t *Tracker) restore(key, val []byte) error {
	rest := string(key[len(t.prefix):])
	if ch, ok := strings.CutPrefix(rest, timedKind); ok {
		part, err := parsePartition(ch)
		if err != nil {
			return fmt.Errorf("key %q: %w", key, err)
		}
		maxSeen, markTime, err := parsePair(val)
		if err != nil {
			return fmt.Errorf("key %q: value %q: %w", key, val, err)
		}
		if in := t.inputs[part]; in != nil && !in.marked {
			in.maxSeen, in.markTime = maxSeen, markTime
		}
		return nil
	}
	if rest, ok := strings.CutPrefix(rest, markedKind); ok {
		i := strings.LastIndexByte(rest, '/')
		if i < 0 {
			return fmt.Errorf("key %q: no /<sender> after the channel", key)
		}
		part, err := parsePartition(rest[:i])
		if err != nil {
			return fmt.Errorf("key %q: %w", key, err)
		}
		sender, err := strconv.Atoi(rest[i+1:])
		if err != nil {
			return fmt.Errorf("key %q: sender: %w", key, err)
		}
		senders, ts, err := parsePair(val)
		if err != nil {
			return fmt.Errorf("key %q: value %q: %w", key, val, err)
		}
		m := Mark{Sender: sender, Senders: int(senders), Time: ts}
		if int64(m.Senders) != senders {
			return fmt.Errorf("key %q: value %q: senders out of range", key, val)
		}
		if err := m.validate(); err != nil {
			return fmt.Errorf("key %q: value %q: %w", key, val, err)
		}
		if in := t.inputs[part]; in != nil && in.marked {
			if err := in.observeMark(m); err != nil {
				return fmt.Errorf("key %q: value %q: %w", key, val, err)
			}
			in.senders[m.Sender].dirty = false // it is what the database holds
		}
		return nil
	}
	return fmt.Errorf("key %q: not a watermark state key (want %q or %q after the prefix)", key, timedKind, markedKind)
}

// parsePartition parses a channel name as a partition.
func parsePartition(ch string) (topic.Partition, error) {
	name, idx, err := topic.ParseChannelName(ch)
	if err != nil {
		return topic.Partition{}, err
	}
	return topic.Partition{Topic: name, Index: idx}, nil
}

// parsePair parses "<a>/<b>", two decimal int64s.
func parsePair(v []byte) (a, b int64, err error) {
	i := bytes.IndexByte(v, '/')
	if i < 0 {
		return 0, 0, fmt.Errorf("want <int>/<int>")
	}
	if a, err = strconv.ParseInt(string(v[:i]), 10, 64); err != nil {
		return 0, 0, err
	}
	if b, err = strconv.ParseInt(string(v[i+1:]), 10, 64); err != nil {
		return 0, 0, err
	}
	return a, b, nil
}

// Observe records a data message's event time ts on part. It is ignored on
// a marked partition (its event times say nothing about what is still to
// come) and on a partition that is not a source of the shard (consumerd
// delivers none).
func (t *Tracker) Observe(part topic.Partition, ts int64) {
	in := t.inputs[part]
	if in == nil || in.marked || ts <= in.maxSeen {
		return
	}
	in.maxSeen, in.dirty, t.stale = ts, true, true
}

// ObserveMark records a mark that arrived on part. It is an error for a mark
// out of range, on a partition that is not a source, or whose Senders
// differs from earlier marks on that partition (the upstream topic's
// partition count, which never changes).
func (t *Tracker) ObserveMark(part topic.Partition, m Mark) error {
	if err := m.validate(); err != nil {
		return fmt.Errorf("windows: mark %s on %s: %w", m, part, err)
	}
	in := t.inputs[part]
	if in == nil {
		return fmt.Errorf("windows: mark %s on %s: not a source of this shard", m, part)
	}
	if !in.marked {
		if m.Time > in.markTime {
			in.markTime, in.dirty, t.stale = m.Time, true, true
		}
		return nil
	}
	if err := in.observeMark(m); err != nil {
		return fmt.Errorf("windows: mark %s on %s: %w", m, part, err)
	}
	t.stale = true
	return nil
}

// observeMark keeps the latest mark of m's sender on a marked input.
func (in *input) observeMark(m Mark) error {
	if in.senders == nil {
		in.senders = make([]senderMark, m.Senders)
	}
	if len(in.senders) != m.Senders {
		return fmt.Errorf("%d senders, but earlier marks there said %d", m.Senders, len(in.senders))
	}
	s := &in.senders[m.Sender]
	switch {
	case !s.heard:
		in.heard++
		*s = senderMark{time: m.Time, heard: true, dirty: true}
	case m.Time > s.time: // a sender's mark never moves back
		s.time, s.dirty = m.Time, true
	}
	return nil
}

// watermark is the input's own watermark.
func (in *input) watermark(delay int64) int64 {
	if !in.marked {
		return max(satAdd(satAdd(in.maxSeen, -delay), -1), in.markTime)
	}
	if in.senders == nil || in.heard < len(in.senders) {
		return MinTime
	}
	w := int64(MaxTime)
	for _, s := range in.senders {
		w = min(w, s.time)
	}
	return w
}

// Current is the shard's watermark: the minimum over its inputs, MinTime if
// any input has nothing yet (or before Load). It never decreases.
func (t *Tracker) Current() int64 {
	if !t.stale || len(t.order) == 0 {
		return t.current
	}
	w := int64(MaxTime)
	for _, in := range t.order {
		w = min(w, in.watermark(t.delay))
	}
	t.current, t.stale = max(t.current, w), false
	return t.current
}

// Flushed is Current as of the last Flush (or Load): the watermark the
// shard's committed state, and so its last Broadcast, reflects. Current() >
// Flushed() says the open transaction advanced the watermark.
func (t *Tracker) Flushed() int64 { return t.flushed }

// Late reports whether a data message with event time ts on the timed
// partition part is late: ts <= Current(), so a window holding it may have
// fired already. What to do with late data (count it, drop it, or apply it
// anyway) is the app's decision. It is false on a marked partition, whose
// data the watermark does not judge, and on a partition that is not a source.
func (t *Tracker) Late(part topic.Partition, ts int64) bool {
	in := t.inputs[part]
	return in != nil && !in.marked && ts <= t.Current()
}

// Flush writes the input state changed since the last Flush into txn, the
// open transaction, so that it commits with the source offsets, exactly
// once, and a new primary resumes the same watermark. Call it last in
// Consumer.Flush (after Timers.Due and Broadcast).
func (t *Tracker) Flush(txn *grocksdb.WriteBatch) {
	var val []byte
	for _, in := range t.order {
		if !in.marked {
			if in.dirty {
				val = appendPair(val[:0], in.maxSeen, in.markTime)
				txn.Put(in.key, val)
				in.dirty = false
			}
			continue
		}
		for i := range in.senders {
			s := &in.senders[i]
			if !s.dirty {
				continue
			}
			key := strconv.AppendInt(append(append([]byte(nil), in.key...), '/'), int64(i), 10)
			val = appendPair(val[:0], int64(len(in.senders)), s.time)
			txn.Put(key, val)
			s.dirty = false
		}
	}
	t.flushed = t.Current()
}

// appendPair appends "<a>/<b>" to dst.
func appendPair(dst []byte, a, b int64) []byte {
	dst = strconv.AppendInt(dst, a, 10)
	dst = append(dst, '/')
	return strconv.AppendInt(dst, b, 10)
}
