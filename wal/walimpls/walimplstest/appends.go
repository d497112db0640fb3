package walimplstest

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// Appends: concurrent appenders, ids, channel names.

type sent struct {
	appender, seq int
	msg           message.MutableMessage
}

// The concurrent-appenders test: per channel, concAppenders goroutines
// append concPerAppender messages each.
const concAppenders, concPerAppender = 5, 100

// testConcurrentAppenders appends from several goroutines to several
// channels at once and checks, per channel, that every acknowledged append
// reads back once, in id order, with each appender's messages in its order.
func testConcurrentAppenders(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	const channels = 3
	var wg sync.WaitGroup
	for c := 0; c < channels; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch := fmt.Sprintf("conf-parallel/%04d", c)
			w, err := o.Open(ctx, &walimpls.OpenOption{Channel: ch})
			if err != nil {
				t.Errorf("Open %q: %v", ch, err)
				return
			}
			defer w.Close()
			acked := appendConcurrently(t, ctx, w, ch)
			if t.Failed() {
				return
			}
			checkConcurrentReadBack(t, ctx, w, ch, acked)
		}()
	}
	wg.Wait()
}

// appendConcurrently appends concPerAppender messages from each of
// concAppenders goroutines to w (channel ch) and returns what each
// acknowledged id was. It reports (t.Errorf) a failed append, an id not
// above its appender's previous one, and an id acknowledged twice.
func appendConcurrently(t testing.TB, ctx context.Context, w walimpls.WALImpls, ch string) map[message.MessageID]sent {
	var mu sync.Mutex
	acked := make(map[message.MessageID]sent)
	var wg sync.WaitGroup
	for a := 0; a < concAppenders; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last message.MessageID
			for i := 0; i < concPerAppender; i++ {
				m := message.MutableMessage{
					Key:        fmt.Sprintf("key-%d-%d", a, i),
					Payload:    []byte(fmt.Sprintf("%s|%d|%d|\x00\xff", ch, a, i)),
					Properties: map[string]string{"appender": strconv.Itoa(a), "seq": strconv.Itoa(i), "channel": ch},
				}
				id, err := w.Append(ctx, m)
				if err != nil {
					t.Errorf("Append %q appender %d seq %d: %v", ch, a, i, err)
					return
				}
				if id <= last {
					t.Errorf("%q appender %d: id %d not above its previous %d", ch, a, id, last)
				}
				last = id
				mu.Lock()
				if prev, dup := acked[id]; dup {
					t.Errorf("%q: id %d acknowledged twice (appender %d seq %d and appender %d seq %d)",
						ch, id, prev.appender, prev.seq, a, i)
				}
				acked[id] = sent{a, i, m}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return acked
}

// checkConcurrentReadBack reads w (channel ch) from its start and reports
// (t.Errorf) unless it delivers exactly the acknowledged appends acked, in
// increasing id order up to LastID, each as appended and each appender's
// in its order, within receiveTimeout.
func checkConcurrentReadBack(t testing.TB, ctx context.Context, w walimpls.WALImpls, ch string, acked map[message.MessageID]sent) {
	last, err := w.LastID(ctx)
	if err != nil {
		t.Errorf("LastID %q: %v", ch, err)
		return
	}
	s, err := w.Read(ctx, walimpls.ReadOption{Name: "conformance", DeliverPolicy: walimpls.DeliverAll()})
	if err != nil {
		t.Errorf("Read %q: %v", ch, err)
		return
	}
	defer s.Close()
	rb := readBack{t: t, ch: ch, last: last, acked: acked, seen: map[message.MessageID]bool{}, nextSeq: make([]int, concAppenders)}
	timer := time.NewTimer(receiveTimeout)
	defer timer.Stop()
	for len(rb.seen) < len(acked) {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				t.Errorf("%q: scanner stopped after %d of %d messages: %v", ch, len(rb.seen), len(acked), s.Error())
				return
			}
			if !rb.check(m) {
				return
			}
		case <-timer.C:
			t.Errorf("%q: stalled after %d of %d messages", ch, len(rb.seen), len(acked))
			return
		}
	}
	if len(acked) != concAppenders*concPerAppender {
		t.Errorf("%q: %d appends acknowledged, want %d", ch, len(acked), concAppenders*concPerAppender)
	}
	if rb.prev != last {
		t.Errorf("%q: last delivered id %d, LastID %d", ch, rb.prev, last)
	}
}

// readBack is checkConcurrentReadBack's state: what was delivered so far.
type readBack struct {
	t     testing.TB
	ch    string
	last  message.MessageID // LastID before the read
	acked map[message.MessageID]sent
	seen  map[message.MessageID]bool
	// nextSeq is, per appender, the seq its next delivered message must have.
	nextSeq []int
	prev    message.MessageID // the last delivered id
}

// check checks the delivered message m against what was appended and
// delivered before it, reporting mismatches; it returns false when reading
// on makes no sense (ids out of order).
func (rb *readBack) check(m message.ImmutableMessage) bool {
	t, ch := rb.t, rb.ch
	if m.ID <= rb.prev {
		t.Errorf("%q: id %d delivered after %d", ch, m.ID, rb.prev)
		return false
	}
	rb.prev = m.ID
	if m.ID > rb.last {
		t.Errorf("%q: delivered id %d above LastID %d", ch, m.ID, rb.last)
	}
	want, ok := rb.acked[m.ID]
	if !ok {
		t.Errorf("%q: delivered id %d that no append acknowledged (payload %q)", ch, m.ID, m.Payload)
		return true
	}
	rb.seen[m.ID] = true
	if m.Channel != ch || m.Key != want.msg.Key || string(m.Payload) != string(want.msg.Payload) ||
		!maps.Equal(m.Properties, want.msg.Properties) {
		t.Errorf("%q id %d: got channel %q key %q payload %q props %v; want key %q payload %q props %v",
			ch, m.ID, m.Channel, m.Key, m.Payload, m.Properties, want.msg.Key, want.msg.Payload, want.msg.Properties)
	}
	if want.seq != rb.nextSeq[want.appender] {
		t.Errorf("%q: appender %d seq %d read at id %d, expected its seq %d first",
			ch, want.appender, want.seq, m.ID, rb.nextSeq[want.appender])
	}
	rb.nextSeq[want.appender] = want.seq + 1
	return true
}

func testIDsNeverReused(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	const ch = "recovery/conf-reopen"
	o := build(t, b)
	w := open(t, ctx, o, ch, 0)
	first := appendN(t, ctx, w, 5, "first-")
	w.Close()
	o.Close()

	o2 := build(t, b)
	defer o2.Close()
	w2 := open(t, ctx, o2, ch, 0)
	defer w2.Close()
	last, err := w2.LastID(ctx)
	if err != nil {
		t.Fatalf("LastID after reopen: %v", err)
	}
	if last != first[len(first)-1] {
		t.Fatalf("LastID after reopen = %d, want %d", last, first[len(first)-1])
	}
	second := appendN(t, ctx, w2, 5, "second-")
	if second[0] <= last {
		t.Fatalf("first id after reopen %d not above last id before %d", second[0], last)
	}
	got := receive(t, read(t, ctx, w2, walimpls.DeliverAll()), 10)
	if want := append(append([]message.MessageID{}, first...), second...); !equalIDs(ids(got), want) {
		t.Fatalf("read back ids %v, want %v", ids(got), want)
	}
	for i, m := range got {
		want := fmt.Sprintf("first-%d", i)
		if i >= 5 {
			want = fmt.Sprintf("second-%d", i-5)
		}
		if string(m.Payload) != want || m.Properties["p"] != want || m.Key != "k-"+want {
			t.Fatalf("message %d: payload %q key %q props %v, want %q", m.ID, m.Payload, m.Key, m.Properties, want)
		}
	}
}

func testDistinctChannelNames(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	names := []string{"dn/0000", "dn_0000", "dn-0000", "dn.0000", "dn/0001", "recovery/dn"}
	ws := make([]walimpls.WALImpls, len(names))
	for i, n := range names {
		ws[i] = open(t, ctx, o, n, 0)
		defer ws[i].Close()
		appendOne(t, ctx, ws[i], n)
	}
	for i, n := range names {
		s := read(t, ctx, ws[i], walimpls.DeliverAll())
		m := receive(t, s, 1)[0]
		if string(m.Payload) != n || m.Channel != n {
			t.Fatalf("channel %q: read payload %q channel %q: distinct names share a backend channel", n, m.Payload, m.Channel)
		}
		expectQuiet(t, s)
	}
}
