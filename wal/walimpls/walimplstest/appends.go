package walimplstest

import (
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
