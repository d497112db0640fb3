package walimplstest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// Bounds of the suite's waits (the package doc states them for backend
// authors). They bound how long a broken backend can stall a test; a correct
// backend meets them with a wide margin.
const (
	// receiveTimeout bounds waiting for an expected message or scanner stop.
	receiveTimeout = 10 * time.Second
	// quietPeriod is how long the suite watches a scanner that must deliver
	// nothing (DeliverLatest on an idle channel, or after the last message).
	quietPeriod = 300 * time.Millisecond
	// closeTimeout bounds Close of a scanner: it must end promptly.
	closeTimeout = 2 * time.Second
)

// Run runs the conformance suite against a backend. newBuilder is called once
// per subtest and must return a builder on a fresh, empty backend (or a fresh
// channel namespace). Subtests build their own openers and close them.
func Run(t *testing.T, newBuilder func(t *testing.T) walimpls.OpenerBuilderImpls) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t testing.TB, b walimpls.OpenerBuilderImpls)
	}{
		{"ConcurrentAppendersParallelChannels", testConcurrentAppenders},
		{"IDsNeverReusedAfterReopen", testIDsNeverReused},
		{"DistinctChannelNames", testDistinctChannelNames},
		{"DeliverAll", testDeliverAll},
		{"DeliverLatest", testDeliverLatest},
		{"DeliverStartFromStartAfter", testDeliverStartFromAfter},
		{"TruncateThenReadRemovedPosition", testTruncate},
		{"TruncateBehindTailingScanner", testTruncateBehindScanner},
		{"Fencing", testFencing},
		{"ScannerCloseEarly", testScannerCloseEarly},
		{"WALCloseStopsScanners", testWALCloseStopsScanners},
		{"AppendAfterClose", testAppendAfterClose},
		{"LastID", testLastID},
		{"Count", testCount},
		{"RemoveChannel", testRemoveChannel},
		{"BatchChain", testBatchChain},
		{"BatchRace", testBatchRace},
		{"AsyncConcurrentPipelines", testAsyncConcurrent},
		{"AsyncFencedPipelineInCallOrder", testAsyncFencedOrder},
		{"AsyncFencingMidPipeline", testAsyncFencingMidPipeline},
		{"AsyncFailureStopsLaterAppends", testAsyncFailureMidPipeline},
		{"AsyncCloseWithAppendsInFlight", testAsyncCloseInFlight},
		{"AdaptorCallbacksInCallOrder", testAdaptorCallbackOrder},
		{"AdaptorFencingMidPipeline", testAdaptorFencingMidPipeline},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder(t)
			if b == nil {
				t.Fatal("newBuilder returned nil")
			}
			tc.fn(t, b)
		})
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func build(t testing.TB, b walimpls.OpenerBuilderImpls) walimpls.OpenerImpls {
	t.Helper()
	o, err := b.Build()
	if err != nil {
		t.Fatalf("Build %s: %v", b.Name(), err)
	}
	return o
}

func open(t testing.TB, ctx context.Context, o walimpls.OpenerImpls, ch string, term uint64) walimpls.WALImpls {
	t.Helper()
	w, err := o.Open(ctx, &walimpls.OpenOption{Channel: ch, Term: term})
	if err != nil {
		t.Fatalf("Open %q term %d: %v", ch, term, err)
	}
	if w.Channel() != ch {
		t.Fatalf("Open %q: Channel() = %q", ch, w.Channel())
	}
	return w
}

func appendOne(t testing.TB, ctx context.Context, w walimpls.WALImpls, payload string) message.MessageID {
	t.Helper()
	id, err := w.Append(ctx, message.MutableMessage{Key: "k-" + payload, Payload: []byte(payload),
		Properties: map[string]string{"p": payload}})
	if err != nil {
		t.Fatalf("Append %q to %q: %v", payload, w.Channel(), err)
	}
	if id == 0 {
		t.Fatalf("Append %q to %q: id 0", payload, w.Channel())
	}
	return id
}

func appendN(t testing.TB, ctx context.Context, w walimpls.WALImpls, n int, prefix string) []message.MessageID {
	t.Helper()
	ids := make([]message.MessageID, n)
	for i := range ids {
		ids[i] = appendOne(t, ctx, w, fmt.Sprintf("%s%d", prefix, i))
		if i > 0 && ids[i] <= ids[i-1] {
			t.Fatalf("Append %d to %q: id %d not above previous %d", i, w.Channel(), ids[i], ids[i-1])
		}
	}
	return ids
}

func read(t testing.TB, ctx context.Context, w walimpls.WALImpls, p walimpls.DeliverPolicy) walimpls.ScannerImpls {
	t.Helper()
	s, err := w.Read(ctx, walimpls.ReadOption{Name: "conformance", DeliverPolicy: p})
	if err != nil {
		t.Fatalf("Read %q at %+v: %v", w.Channel(), p, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// receive reads exactly n messages, failing on a stop or a stall.
func receive(t testing.TB, s walimpls.ScannerImpls, n int) []message.ImmutableMessage {
	t.Helper()
	out := make([]message.ImmutableMessage, 0, n)
	timer := time.NewTimer(receiveTimeout)
	defer timer.Stop()
	for len(out) < n {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				<-s.Done()
				t.Fatalf("scanner stopped after %d of %d messages: %v", len(out), n, s.Error())
			}
			if len(out) > 0 && m.ID <= out[len(out)-1].ID {
				t.Fatalf("scanner delivered id %d after %d: not strictly increasing", m.ID, out[len(out)-1].ID)
			}
			out = append(out, m)
		case <-timer.C:
			t.Fatalf("scanner stalled: %d of %d messages within %v", len(out), n, receiveTimeout)
		}
	}
	return out
}

// expectQuiet fails if the scanner delivers anything or stops within quietPeriod.
func expectQuiet(t testing.TB, s walimpls.ScannerImpls) {
	t.Helper()
	timer := time.NewTimer(quietPeriod)
	defer timer.Stop()
	select {
	case m, ok := <-s.Chan():
		if !ok {
			<-s.Done()
			t.Fatalf("scanner stopped, expected it to wait: %v", s.Error())
		}
		t.Fatalf("scanner delivered id %d (payload %q), expected nothing", m.ID, m.Payload)
	case <-timer.C:
	}
}

func ids(ms []message.ImmutableMessage) []message.MessageID {
	out := make([]message.MessageID, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func equalIDs(a, b []message.MessageID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// waitStopped waits (bounded) for the scanner to stop and returns its Error.
func waitStopped(t testing.TB, s walimpls.ScannerImpls, d time.Duration) error {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(d):
		t.Fatalf("scanner did not stop within %v", d)
	}
	// Chan must be closed once Done is; drain what was buffered.
	for range s.Chan() {
	}
	return s.Error()
}

type sent struct {
	appender, seq int
	msg           message.MutableMessage
}

func testConcurrentAppenders(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	const channels, appenders, perAppender = 3, 5, 100
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
			var mu sync.Mutex
			acked := make(map[message.MessageID]sent)
			var awg sync.WaitGroup
			for a := 0; a < appenders; a++ {
				awg.Add(1)
				go func() {
					defer awg.Done()
					var last message.MessageID
					for i := 0; i < perAppender; i++ {
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
			awg.Wait()
			if t.Failed() {
				return
			}
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
			seen := make(map[message.MessageID]bool)
			nextSeq := make([]int, appenders)
			var prev message.MessageID
			timer := time.NewTimer(receiveTimeout)
			defer timer.Stop()
			for len(seen) < len(acked) {
				select {
				case m, ok := <-s.Chan():
					if !ok {
						t.Errorf("%q: scanner stopped after %d of %d messages: %v", ch, len(seen), len(acked), s.Error())
						return
					}
					if m.ID <= prev {
						t.Errorf("%q: id %d delivered after %d", ch, m.ID, prev)
						return
					}
					prev = m.ID
					if m.ID > last {
						t.Errorf("%q: delivered id %d above LastID %d", ch, m.ID, last)
					}
					want, ok := acked[m.ID]
					if !ok {
						t.Errorf("%q: delivered id %d that no append acknowledged (payload %q)", ch, m.ID, m.Payload)
						continue
					}
					seen[m.ID] = true
					if m.Channel != ch || m.Key != want.msg.Key || string(m.Payload) != string(want.msg.Payload) ||
						!maps.Equal(m.Properties, want.msg.Properties) {
						t.Errorf("%q id %d: got channel %q key %q payload %q props %v; want key %q payload %q props %v",
							ch, m.ID, m.Channel, m.Key, m.Payload, m.Properties, want.msg.Key, want.msg.Payload, want.msg.Properties)
					}
					if want.seq != nextSeq[want.appender] {
						t.Errorf("%q: appender %d seq %d read at id %d, expected its seq %d first",
							ch, want.appender, want.seq, m.ID, nextSeq[want.appender])
					}
					nextSeq[want.appender] = want.seq + 1
				case <-timer.C:
					t.Errorf("%q: stalled after %d of %d messages", ch, len(seen), len(acked))
					return
				}
			}
			if len(acked) != appenders*perAppender {
				t.Errorf("%q: %d appends acknowledged, want %d", ch, len(acked), appenders*perAppender)
			}
			if prev != last {
				t.Errorf("%q: last delivered id %d, LastID %d", ch, prev, last)
			}
		}()
	}
	wg.Wait()
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

func testDeliverAll(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-all/0000", 0)
	defer w.Close()
	// A scanner opened on an empty channel waits, then sees later appends.
	early := read(t, ctx, w, walimpls.DeliverAll())
	expectQuiet(t, early)
	want := appendN(t, ctx, w, 10, "m")
	if got := ids(receive(t, early, 10)); !equalIDs(got, want) {
		t.Fatalf("DeliverAll on empty channel then appends: ids %v, want %v", got, want)
	}
	if got := ids(receive(t, read(t, ctx, w, walimpls.DeliverAll()), 10)); !equalIDs(got, want) {
		t.Fatalf("DeliverAll: ids %v, want %v", got, want)
	}
	s := read(t, ctx, w, walimpls.DeliverStartAfter(0))
	if got := ids(receive(t, s, 10)); !equalIDs(got, want) {
		t.Fatalf("DeliverStartAfter(0): ids %v, want %v", got, want)
	}
	expectQuiet(t, s)
}

func testDeliverLatest(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-latest/0000", 0)
	defer w.Close()
	// Idle, empty channel: nothing arrives until an append.
	s := read(t, ctx, w, walimpls.DeliverLatest())
	expectQuiet(t, s)
	id := appendOne(t, ctx, w, "new-1")
	if m := receive(t, s, 1)[0]; m.ID != id || string(m.Payload) != "new-1" {
		t.Fatalf("DeliverLatest: got id %d %q, want id %d new-1", m.ID, m.Payload, id)
	}
	expectQuiet(t, s)
	// Channel with history: the history is not delivered.
	appendN(t, ctx, w, 5, "old-")
	s2 := read(t, ctx, w, walimpls.DeliverLatest())
	expectQuiet(t, s2)
	id2 := appendOne(t, ctx, w, "new-2")
	if m := receive(t, s2, 1)[0]; m.ID != id2 || string(m.Payload) != "new-2" {
		t.Fatalf("DeliverLatest after history: got id %d %q, want id %d new-2", m.ID, m.Payload, id2)
	}
	expectQuiet(t, s2)
}

func testDeliverStartFromAfter(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-start/0000", 0)
	defer w.Close()
	all := appendN(t, ctx, w, 10, "m")
	for _, k := range []int{0, 4, 9} {
		s := read(t, ctx, w, walimpls.DeliverStartFrom(all[k]))
		if got := ids(receive(t, s, 10-k)); !equalIDs(got, all[k:]) {
			t.Fatalf("StartFrom(%d): ids %v, want %v", all[k], got, all[k:])
		}
		expectQuiet(t, s)
		s = read(t, ctx, w, walimpls.DeliverStartAfter(all[k]))
		if got := ids(receive(t, s, 9-k)); !equalIDs(got, all[k+1:]) {
			t.Fatalf("StartAfter(%d): ids %v, want %v", all[k], got, all[k+1:])
		}
		expectQuiet(t, s)
	}
	// Starting after the last message waits for the next one.
	s := read(t, ctx, w, walimpls.DeliverStartAfter(all[9]))
	expectQuiet(t, s)
	next := appendOne(t, ctx, w, "next")
	if m := receive(t, s, 1)[0]; m.ID != next {
		t.Fatalf("StartAfter(last) then append: got id %d, want %d", m.ID, next)
	}
}

// expectTruncated opens a scanner at p and requires ErrTruncated from Read or
// from the scanner's Error, with no message delivered and within a bound.
func expectTruncated(t testing.TB, ctx context.Context, w walimpls.WALImpls, p walimpls.DeliverPolicy) {
	t.Helper()
	s, err := w.Read(ctx, walimpls.ReadOption{Name: "conformance", DeliverPolicy: p})
	if err != nil {
		if !errors.Is(err, walimpls.ErrTruncated) {
			t.Fatalf("Read at %+v: error %v does not wrap ErrTruncated", p, err)
		}
		return
	}
	defer s.Close()
	timer := time.NewTimer(receiveTimeout)
	defer timer.Stop()
	select {
	case m, ok := <-s.Chan():
		if ok {
			t.Fatalf("Read at truncated %+v delivered id %d (%q): a silent skip", p, m.ID, m.Payload)
		}
	case <-timer.C:
		t.Fatalf("Read at truncated %+v: scanner neither failed nor delivered within %v (a stall)", p, receiveTimeout)
	}
	if err := waitStopped(t, s, closeTimeout); !errors.Is(err, walimpls.ErrTruncated) {
		t.Fatalf("scanner at truncated %+v stopped with %v, want an error wrapping ErrTruncated", p, err)
	}
}

func testTruncate(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "recovery/conf-truncate", 0)
	defer w.Close()
	all := appendN(t, ctx, w, 10, "m")
	if err := w.Truncate(ctx, all[5]); errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("%s cannot truncate: %v", w.WALName(), err)
	} else if err != nil {
		t.Fatalf("Truncate(%d): %v", all[5], err)
	}
	expectTruncated(t, ctx, w, walimpls.DeliverStartFrom(all[0]))
	expectTruncated(t, ctx, w, walimpls.DeliverStartFrom(all[4]))
	expectTruncated(t, ctx, w, walimpls.DeliverStartAfter(all[3]))
	// Positions 0 ask for everything from the start, which is gone.
	expectTruncated(t, ctx, w, walimpls.DeliverStartAfter(0))
	expectTruncated(t, ctx, w, walimpls.DeliverStartFrom(0))
	// DeliverAll starts at the truncation point.
	if got := ids(receive(t, read(t, ctx, w, walimpls.DeliverAll()), 5)); !equalIDs(got, all[5:]) {
		t.Fatalf("DeliverAll after Truncate(%d): ids %v, want %v", all[5], got, all[5:])
	}
	if got := ids(receive(t, read(t, ctx, w, walimpls.DeliverStartFrom(all[5])), 5)); !equalIDs(got, all[5:]) {
		t.Fatalf("StartFrom(%d) after Truncate: ids %v, want %v", all[5], got, all[5:])
	}
	if got := ids(receive(t, read(t, ctx, w, walimpls.DeliverStartAfter(all[4])), 5)); !equalIDs(got, all[5:]) {
		t.Fatalf("StartAfter(%d) after Truncate(%d): ids %v, want %v", all[4], all[5], got, all[5:])
	}
	last, err := w.LastID(ctx)
	if err != nil || last != all[9] {
		t.Fatalf("LastID after Truncate = %d, %v; want %d", last, err, all[9])
	}
	// Appends continue above the old ids.
	if id := appendOne(t, ctx, w, "after"); id <= all[9] {
		t.Fatalf("append after Truncate got id %d, not above %d", id, all[9])
	}
}

func testTruncateBehindScanner(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "recovery/conf-truncate-tail", 0)
	defer w.Close()
	all := appendN(t, ctx, w, 4, "m")
	s := read(t, ctx, w, walimpls.DeliverAll())
	receive(t, s, 4)
	// The scanner is caught up; truncating below its position changes nothing for it.
	if err := w.Truncate(ctx, all[3]); errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("%s cannot truncate: %v", w.WALName(), err)
	} else if err != nil {
		t.Fatalf("Truncate(%d): %v", all[3], err)
	}
	next := appendOne(t, ctx, w, "next")
	if m := receive(t, s, 1)[0]; m.ID != next {
		t.Fatalf("caught-up scanner after Truncate: got id %d, want %d", m.ID, next)
	}
}

func testFencing(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	const ch = "recovery/conf-fence"
	o := build(t, b)
	defer o.Close()
	w1 := open(t, ctx, o, ch, 1)
	defer w1.Close()
	ok1 := appendOne(t, ctx, w1, "w1-a")

	// A second opener, as another process would.
	o2 := build(t, b)
	defer o2.Close()
	w2 := open(t, ctx, o2, ch, 2)
	defer w2.Close()
	for i := 0; i < 3; i++ {
		expectFenced(t, ctx, w1, fmt.Sprintf("w1-fenced-%d", i))
	}
	ok2 := appendOne(t, ctx, w2, "w2-a")
	// A writer opening with a lower term is fenced from the start.
	w0 := open(t, ctx, o, ch, 1)
	defer w0.Close()
	expectFenced(t, ctx, w0, "stale")
	ok3 := appendOne(t, ctx, w2, "w2-b")
	got := receive(t, read(t, ctx, w2, walimpls.DeliverAll()), 3)
	if want := []message.MessageID{ok1, ok2, ok3}; !equalIDs(ids(got), want) {
		t.Fatalf("read back ids %v, want only the acknowledged %v", ids(got), want)
	}
	for i, want := range []string{"w1-a", "w2-a", "w2-b"} {
		if string(got[i].Payload) != want {
			t.Fatalf("message %d: payload %q, want %q", got[i].ID, got[i].Payload, want)
		}
	}
	// Fencing holds across openers built later too.
	o3 := build(t, b)
	defer o3.Close()
	w3 := open(t, ctx, o3, ch, 3)
	defer w3.Close()
	expectFenced(t, ctx, w2, "w2-fenced")
	appendOne(t, ctx, w3, "w3-a")
}

// expectFenced appends to a superseded writer: the append must fail with
// ErrFenced, or first retryably (a backend may learn of the fence only when
// it re-sends) and then, within a few re-sends, with ErrFenced. Callers
// check that nothing was stored.
func expectFenced(t testing.TB, ctx context.Context, w walimpls.WALImpls, payload string) {
	t.Helper()
	msg := message.MutableMessage{Payload: []byte(payload), DedupeID: "fenced-" + payload}
	for try := 1; try <= 3; try++ {
		_, err := w.Append(ctx, msg)
		switch {
		case errors.Is(err, walimpls.ErrFenced):
			return
		case err == nil:
			t.Fatalf("append %q of a superseded term: stored, want ErrFenced", payload)
		case !walimpls.IsRetryable(err):
			t.Fatalf("append %q of a superseded term, try %d: %v, want ErrFenced or a retryable error", payload, try, err)
		}
	}
	t.Fatalf("append %q of a superseded term: not ErrFenced after 3 tries", payload)
}

func testScannerCloseEarly(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-close/0000", 0)
	defer w.Close()
	appendN(t, ctx, w, 200, "m")
	cases := []struct {
		name string
		p    walimpls.DeliverPolicy
		take int
	}{
		{"busy", walimpls.DeliverAll(), 1},
		{"untouched", walimpls.DeliverAll(), 0},
		{"idle", walimpls.DeliverLatest(), 0},
	}
	for _, c := range cases {
		s, err := w.Read(ctx, walimpls.ReadOption{Name: "conformance-" + c.name, DeliverPolicy: c.p})
		if err != nil {
			t.Fatalf("%s: Read: %v", c.name, err)
		}
		if c.take > 0 {
			receive(t, s, c.take)
		}
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			_ = s.Close()
		}()
		select {
		case <-closed:
		case <-time.After(closeTimeout):
			t.Fatalf("%s: scanner Close did not return within %v", c.name, closeTimeout)
		}
		if err := waitStopped(t, s, closeTimeout); !errors.Is(err, walimpls.ErrScannerClosed) {
			t.Fatalf("%s: Error after Close = %v, want ErrScannerClosed", c.name, err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("%s: second Close: %v", c.name, err)
		}
	}
}

func testWALCloseStopsScanners(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-walclose/0000", 0)
	appendOne(t, ctx, w, "m")
	s := read(t, ctx, w, walimpls.DeliverLatest())
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		w.Close()
	}()
	select {
	case <-closed:
	case <-time.After(closeTimeout):
		t.Fatalf("WAL Close with an open scanner did not return within %v", closeTimeout)
	}
	if err := waitStopped(t, s, closeTimeout); err == nil {
		t.Fatalf("scanner of a closed WAL stopped with a nil Error")
	}
}

func testAppendAfterClose(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-closed/0000", 0)
	id := appendOne(t, ctx, w, "m")
	w.Close()
	if _, err := w.Append(ctx, message.MutableMessage{Payload: []byte("late")}); !errors.Is(err, walimpls.ErrClosed) {
		t.Fatalf("Append after Close: error %v, want ErrClosed", err)
	}
	// The message appended before Close is still there for a new WAL.
	w2 := open(t, ctx, o, "conf-closed/0000", 0)
	defer w2.Close()
	got := receive(t, read(t, ctx, w2, walimpls.DeliverAll()), 1)
	if got[0].ID != id {
		t.Fatalf("after reopen: id %d, want %d", got[0].ID, id)
	}
	expectQuiet(t, read(t, ctx, w2, walimpls.DeliverStartAfter(id)))
}

func testLastID(t testing.TB, b walimpls.OpenerBuilderImpls) {
	ctx := testCtx(t)
	o := build(t, b)
	defer o.Close()
	w := open(t, ctx, o, "conf-lastid/0000", 0)
	defer w.Close()
	if last, err := w.LastID(ctx); err != nil || last != 0 {
		t.Fatalf("LastID of an empty channel = %d, %v; want 0", last, err)
	}
	for i := 0; i < 3; i++ {
		id := appendOne(t, ctx, w, fmt.Sprintf("m%d", i))
		if last, err := w.LastID(ctx); err != nil || last != id {
			t.Fatalf("LastID after append %d = %d, %v; want %d", i, last, err, id)
		}
	}
	// Another WAL on the same channel sees the same LastID.
	w2 := open(t, ctx, o, "conf-lastid/0000", 0)
	defer w2.Close()
	want, _ := w.LastID(ctx)
	if last, err := w2.LastID(ctx); err != nil || last != want {
		t.Fatalf("LastID from a second WAL = %d, %v; want %d", last, err, want)
	}
}
