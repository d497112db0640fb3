package wal_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

func TestMessageFilter(t *testing.T) {
	e := newEnv(t, false)
	w := e.open(t, "t/0000", 0)
	ctx := context.Background()
	s, err := w.Read(ctx, wal.ReadOption{Name: "odd", DeliverPolicy: wal.DeliverAll(), MessageFilter: []wal.MessageFilter{
		func(m *message.ImmutableMessage) bool { n, _ := strconv.Atoi(string(m.Payload)); return n%2 == 1 },
		func(m *message.ImmutableMessage) bool { return string(m.Payload) != "5" },
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 10; i++ {
		if _, err := w.Append(ctx, msg(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if got := payloads(readN(t, s, 4)); !equal(got, []string{"1", "3", "7", "9"}) {
		t.Fatalf("filtered = %v, want [1 3 7 9]", got)
	}
}

// recordingHandler delivers to a slice, checking the Handle protocol.
type recordingHandler struct {
	t      *testing.T
	mu     sync.Mutex
	got    []string
	closed int
	after  bool // Handle called after Close
}

func (h *recordingHandler) Handle(p wal.HandleParam) wal.HandleResult {
	h.mu.Lock()
	if h.closed > 0 {
		h.after = true
	}
	h.mu.Unlock()
	if p.Message != nil {
		if p.Upstream != nil {
			h.t.Errorf("Handle got both Message and Upstream")
		}
		h.mu.Lock()
		h.got = append(h.got, string(p.Message.Payload))
		h.mu.Unlock()
		return wal.HandleResult{MessageHandled: true}
	}
	select {
	case <-p.Ctx.Done():
		return wal.HandleResult{Error: p.Ctx.Err()}
	case m, ok := <-p.Upstream:
		if !ok {
			return wal.HandleResult{Error: wal.ErrUpstreamClosed}
		}
		return wal.HandleResult{Incoming: &m}
	}
}

func (h *recordingHandler) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed++
}

func (h *recordingHandler) snapshot() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got...)
}

func TestMessageHandler(t *testing.T) {
	e := newEnv(t, false)
	w := e.open(t, "t/0000", 0)
	ctx := context.Background()
	var ids []message.MessageID
	for i := 0; i < 5; i++ {
		r, err := w.Append(ctx, msg(strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.MessageID)
	}
	h := &recordingHandler{t: t}
	s, err := w.Read(ctx, wal.ReadOption{Name: "h", DeliverPolicy: wal.DeliverStartAfter(ids[2]), MesasgeHandler: h,
		MessageFilter: []wal.MessageFilter{func(m *message.ImmutableMessage) bool { return string(m.Payload) != "3" }}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Chan() != nil {
		t.Fatal("Chan not nil with a MessageHandler")
	}
	waitfor.Until(t, wait, "the handler to get a message", func() (bool, string) { return len(h.snapshot()) > 0, "" })
	if got := h.snapshot(); !equal(got, []string{"4"}) {
		t.Fatalf("handled %v, want [4]", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(s.Error(), wal.ErrScannerClosed) {
		t.Fatalf("Error after Close = %v, want ErrScannerClosed", s.Error())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed != 1 || h.after {
		t.Fatalf("handler closed %d times, Handle after Close %v; want once, false", h.closed, h.after)
	}
}

// failingHandler stops the scanner with its own error.
type failingHandler struct{ err error }

func (h failingHandler) Handle(p wal.HandleParam) wal.HandleResult {
	if p.Message != nil {
		return wal.HandleResult{Error: h.err}
	}
	select {
	case <-p.Ctx.Done():
		return wal.HandleResult{Error: p.Ctx.Err()}
	case m, ok := <-p.Upstream:
		if !ok {
			return wal.HandleResult{Error: wal.ErrUpstreamClosed}
		}
		return wal.HandleResult{Incoming: &m}
	}
}

func (failingHandler) Close() {}

func TestHandlerErrorStopsScanner(t *testing.T) {
	e := newEnv(t, false)
	w := e.open(t, "t/0000", 0)
	ctx := context.Background()
	if _, err := w.Append(ctx, msg("x")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("apply failed")
	s, err := w.Read(ctx, wal.ReadOption{DeliverPolicy: wal.DeliverAll(), MesasgeHandler: failingHandler{boom}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(wait):
		t.Fatal("scanner did not stop on the handler's error")
	}
	if !errors.Is(s.Error(), boom) {
		t.Fatalf("Error = %v, want the handler's error", s.Error())
	}
	_ = s.Close()
	if !errors.Is(s.Error(), boom) {
		t.Fatalf("Close after the stop changed Error to %v", s.Error())
	}
}

func TestScannerStopsWithReadContext(t *testing.T) {
	e := newEnv(t, false)
	w := e.open(t, "t/0000", 0)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := w.Read(ctx, wal.ReadOption{DeliverPolicy: wal.DeliverLatest()})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-s.Done():
	case <-time.After(wait):
		t.Fatal("scanner did not stop when its ctx ended")
	}
	if !errors.Is(s.Error(), context.Canceled) {
		t.Fatalf("Error = %v, want context.Canceled", s.Error())
	}
	if _, ok := <-s.Chan(); ok {
		t.Fatal("Chan not closed after stop")
	}
}

func TestWALCloseStopsScanners(t *testing.T) {
	e := newEnv(t, false)
	w := e.open(t, "t/0000", 0)
	s, err := w.Read(context.Background(), wal.ReadOption{DeliverPolicy: wal.DeliverAll()})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	select {
	case <-s.Done():
	case <-time.After(wait):
		t.Fatal("scanner not stopped by WAL Close")
	}
	if !errors.Is(s.Error(), wal.ErrClosed) {
		t.Fatalf("Error = %v, want ErrClosed", s.Error())
	}
}

func TestTruncatedReadSurfaces(t *testing.T) {
	e := newEnv(t, false)
	w := e.open(t, "recovery/x", 0)
	ctx := context.Background()
	var ids []message.MessageID
	for i := 0; i < 5; i++ {
		r, err := w.Append(ctx, msg(strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.MessageID)
	}
	if err := w.Truncate(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	s, err := w.Read(ctx, wal.ReadOption{DeliverPolicy: wal.DeliverStartFrom(ids[1])})
	if err == nil {
		defer s.Close()
		select {
		case m, ok := <-s.Chan():
			if ok {
				t.Fatalf("delivered %d from a truncated position", m.ID)
			}
		case <-time.After(wait):
			t.Fatal("stalled at a truncated position")
		}
		<-s.Done()
		err = s.Error()
	}
	if !errors.Is(err, wal.ErrTruncated) {
		t.Fatalf("read from truncated position: %v, want ErrTruncated", err)
	}
	if got := payloads(readAll(t, w)); !equal(got, []string{"3", "4"}) {
		t.Fatalf("after Truncate: %v, want [3 4]", got)
	}
}

// TestScannerCloseWithUnreadMessages: a scanner whose reader stopped reading
// (messages pending for Chan) still closes promptly, and so does its WAL.
func TestScannerCloseWithUnreadMessages(t *testing.T) {
	e := newEnv(t, false)
	w := e.open(t, "t/0000", 0)
	ctx := context.Background()
	for i := 0; i < 300; i++ {
		if _, err := w.Append(ctx, msg(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	s1, err := w.Read(ctx, wal.ReadOption{DeliverPolicy: wal.DeliverAll()})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := w.Read(ctx, wal.ReadOption{DeliverPolicy: wal.DeliverAll()})
	if err != nil {
		t.Fatal(err)
	}
	readN(t, s1, 1)
	readN(t, s2, 1)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = s1.Close()
	}()
	select {
	case <-closed:
	case <-time.After(wait):
		t.Fatal("Close of a scanner with unread messages did not return")
	}
	if !errors.Is(s1.Error(), wal.ErrScannerClosed) {
		t.Fatalf("Error = %v, want ErrScannerClosed", s1.Error())
	}
	closed = make(chan struct{})
	go func() {
		defer close(closed)
		w.Close()
	}()
	select {
	case <-closed:
	case <-time.After(wait):
		t.Fatal("WAL Close with an unread scanner did not return")
	}
	if !errors.Is(s2.Error(), wal.ErrClosed) {
		t.Fatalf("scanner of the closed WAL: Error = %v, want ErrClosed", s2.Error())
	}
}
