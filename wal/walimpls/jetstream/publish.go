package jetstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// The publisher: every append, term 0 or fenced, is published on core NATS
// with a reply subject "<inbox>.<token>" (inbox unique per opener, token a
// counter in base 36); the opener subscribes once to "<inbox>.*" and keeps
// its own table of appends waiting, keyed by token. The reply handler (one
// goroutine, the subscription's) decodes the PubAck with a small
// hand-written parser (encoding/json for anything else, such as an error
// reply) and reports the append. None of nats.go's PublishMsgAsync
// bookkeeping (a map entry, a future and a JSON decode per append) is needed.
//
// In-flight appends per connection are bounded by Config.MaxPending (slots);
// an append blocks for a slot until one frees, its context ends or its WAL
// is killed by Close. The watchdog fails entries that waited longer than
// AckTimeout; a disconnect fails every entry (nats.ErrDisconnected, like
// nats.go's async publisher); WAL.Close fails the WAL's entries left after
// its drain timeout; a no-responders reply (no stream captures the subject
// yet, e.g. a replicated stream just created) fails the entry with
// jetstream.ErrNoStreamResponse. All of these are retryable: the wal adaptor
// retries them with its one policy. A reply for an entry already failed is
// ignored.
//
// An idempotent append (term 0 with a DedupeID) is failed, retryably, when
// the connection is not up, instead of going to nats.go's reconnect
// buffer: the disconnect has already failed the appends sent before it, and
// the adaptor resends those, in call order, once the server answers; a
// buffered later one, flushed at the reconnect, would be stored ahead of
// them. (A disconnect between the check and the publish can still buffer
// one: the disconnect handler fails it, and its resend is acknowledged as a
// duplicate — stored once, possibly ahead of earlier ones.)

// fastShards spreads the pending table over independently locked
// shards (token modulo fastShards).
const fastShards = 16

type fastShard struct {
	mu sync.Mutex
	m  map[uint64]*pending
	_  [48]byte // keep shards on separate cache lines
}

// fastPub is the opener's publisher.
type fastPub struct {
	inbox string // "_INBOX.<nuid>.": reply subjects are inbox + token
	sub   *nats.Subscription
	slots chan struct{} // one element per append in flight
	pend  [fastShards]fastShard
	next  atomic.Uint64 // token counter
}

func (o *opener) startFast() error {
	f := &o.fast
	f.inbox = nats.NewInbox() + "."
	f.slots = make(chan struct{}, o.cfg.MaxPending)
	for i := range f.pend {
		f.pend[i].m = map[uint64]*pending{}
	}
	sub, err := o.nc.Subscribe(f.inbox+"*", o.onFastReply)
	if err != nil {
		return fmt.Errorf("jetstream: subscribe to acknowledgements on %s: %w", o.cfg.URL, err)
	}
	// In-flight replies are bounded by MaxPending; never drop one as a slow
	// consumer.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("jetstream: acknowledgement subscription on %s: %w", o.cfg.URL, err)
	}
	f.sub = sub
	return nil
}

func (f *fastPub) shard(tok uint64) *fastShard { return &f.pend[tok%fastShards] }

// takeFast removes and returns the entry of tok (nil if gone), releasing its
// slot.
func (f *fastPub) take(tok uint64) *pending {
	sh := f.shard(tok)
	sh.mu.Lock()
	p := sh.m[tok]
	if p != nil {
		delete(sh.m, tok)
	}
	sh.mu.Unlock()
	if p != nil {
		<-f.slots
	}
	return p
}

// publishFast publishes an append on core NATS. On an error nothing is
// waiting for an acknowledgement and the callback has not been called.
func (w *walImpl) publishFast(ctx context.Context, p *pending) error {
	if err := w.checkSize(p.m); err != nil {
		return err
	}
	f := &w.o.fast
	select {
	case f.slots <- struct{}{}:
	default:
		select { // backpressure: MaxPending appends in flight
		case f.slots <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("jetstream: append to channel %q: waiting for an in-flight slot: %w", w.n.channel, ctx.Err())
		case <-w.kill:
			return fmt.Errorf("jetstream: append to channel %q: %w", w.n.channel, walimpls.ErrClosed)
		}
	}
	tok := f.next.Add(1)
	p.m.Reply = f.inbox + strconv.FormatUint(tok, 36)
	p.tok = tok
	sh := f.shard(tok)
	sh.mu.Lock()
	p.epoch = w.o.epoch.Load()
	sh.m[tok] = p
	sh.mu.Unlock()
	if p.idem && !w.o.nc.IsConnected() {
		// Registered first, checked after: a disconnect that starts between
		// the check and the publish finds the entry and fails it.
		if f.take(tok) == nil {
			return nil
		}
		return fmt.Errorf("jetstream: append to channel %q on %s: not sent while reconnecting: %w", w.n.channel, w.o.cfg.URL, nats.ErrDisconnected)
	}
	if err := w.o.nc.PublishMsg(p.m); err != nil {
		if f.take(tok) == nil {
			return nil // already failed by the watchdog, a disconnect or Close
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			err = walimpls.Permanent(err)
		}
		return fmt.Errorf("jetstream: append to channel %q on %s: %w", w.n.channel, w.o.cfg.URL, err)
	}
	return nil
}

// onFastReply handles the reply to an append. It runs on
// the subscription's goroutine and never blocks (the callbacks must not).
func (o *opener) onFastReply(m *nats.Msg) {
	f := &o.fast
	if len(m.Subject) <= len(f.inbox) {
		return
	}
	tok, err := strconv.ParseUint(m.Subject[len(f.inbox):], 36, 64)
	if err != nil {
		return
	}
	seq, err := parsePubAck(m)
	p := f.take(tok)
	if p == nil {
		return // failed already (ack timeout, disconnect, Close)
	}
	if err != nil {
		p.w.finish(p, 0, o.replyErr(p, err))
		return
	}
	p.w.finish(p, message.MessageID(seq), nil)
}

// pubAckResponse is the full form of a publish reply.
type pubAckResponse struct {
	Error    *jetstream.APIError `json:"error,omitempty"`
	Stream   string              `json:"stream"`
	Sequence uint64              `json:"seq"`
}

// parsePubAck returns the stream sequence of an acknowledgement, or the
// error the server replied with (no responders: no stream captures the
// subject; an API error; or an unreadable reply).
func parsePubAck(m *nats.Msg) (uint64, error) {
	if len(m.Data) == 0 {
		if m.Header.Get("Status") == "503" {
			return 0, jetstream.ErrNoStreamResponse
		}
		return 0, jetstream.ErrInvalidJSAck
	}
	if seq, ok := parsePubAckFast(m.Data); ok {
		return seq, nil
	}
	var pa pubAckResponse
	if err := json.Unmarshal(m.Data, &pa); err != nil {
		return 0, fmt.Errorf("%w: %v", jetstream.ErrInvalidJSAck, err)
	}
	if pa.Error != nil {
		return 0, pa.Error
	}
	if pa.Stream == "" {
		return 0, jetstream.ErrInvalidJSAck
	}
	return pa.Sequence, nil
}

var (
	ackStreamPfx = []byte(`{"stream":"`)
	ackSeqPfx    = []byte(`","seq":`)
	ackDupSfx    = []byte(`,"duplicate":true}`)
)

// parsePubAckFast parses the common acknowledgement forms
// {"stream":"S","seq":N} and {"stream":"S","seq":N,"duplicate":true}; ok is
// false for anything else (the caller falls back to encoding/json).
func parsePubAckFast(b []byte) (seq uint64, ok bool) {
	if !bytes.HasPrefix(b, ackStreamPfx) {
		return 0, false
	}
	b = b[len(ackStreamPfx):]
	i := 0
	for ; i < len(b) && b[i] != '"'; i++ {
		if b[i] < 0x20 || b[i] > 0x7e || b[i] == '\\' {
			return 0, false // not a plain stream name: let encoding/json decide
		}
	}
	if i == 0 || i == len(b) {
		return 0, false
	}
	b = b[i:]
	if !bytes.HasPrefix(b, ackSeqPfx) {
		return 0, false
	}
	b = b[len(ackSeqPfx):]
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		if n >= 19 {
			return 0, false // may overflow: let encoding/json decide
		}
		seq = seq*10 + uint64(b[n]-'0')
		n++
	}
	if n == 0 || (n > 1 && b[0] == '0') {
		return 0, false
	}
	switch rest := b[n:]; {
	case len(rest) == 1 && rest[0] == '}', bytes.Equal(rest, ackDupSfx):
		return seq, true
	}
	return 0, false
}

// failFast fails the entries selected by pick with errFor's error and
// returns how many it failed.
func (o *opener) failFast(pick func(*pending) bool, errFor func(*pending) error) int {
	f := &o.fast
	var ps []*pending
	for i := range f.pend {
		sh := &f.pend[i]
		sh.mu.Lock()
		for tok, p := range sh.m {
			if pick(p) {
				ps = append(ps, p)
				delete(sh.m, tok)
			}
		}
		sh.mu.Unlock()
	}
	for range ps {
		<-f.slots
	}
	for _, p := range ps {
		p.w.finish(p, 0, errFor(p))
	}
	return len(ps)
}

// ackTimeoutErr is the error of an append whose acknowledgement did not come
// within AckTimeout. It wraps ErrJetStreamPublisherClosed (as nats.go's own
// async publisher would report it): retryable.
func (o *opener) ackTimeoutErr(p *pending) error {
	return fmt.Errorf("jetstream: append to channel %q on %s: no acknowledgement within the ack timeout (%v): %w",
		p.w.n.channel, o.cfg.URL, o.cfg.AckTimeout, jetstream.ErrJetStreamPublisherClosed)
}

// replyErr wraps an error reply: a chained append rejected because the
// stream moved is errConflict (retryable; the re-send finds out why); any
// other rejection of the request itself (HTTP-style code 400: a header over
// 64 KiB, a message over the stream's limits) is permanent — a retry would
// only be rejected again; the rest (unavailable, timeouts) is retryable.
func (o *opener) replyErr(p *pending, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case isWrongLastSeq(err):
		return fmt.Errorf("jetstream: append to channel %q on %s: %w: %w", p.w.n.channel, o.cfg.URL, errConflict, err)
	case errors.As(err, &apiErr) && apiErr.Code == http.StatusBadRequest:
		return walimpls.Permanent(fmt.Errorf("jetstream: append to channel %q on %s: rejected: %w", p.w.n.channel, o.cfg.URL, err))
	}
	return fmt.Errorf("jetstream: append to channel %q on %s: %w", p.w.n.channel, o.cfg.URL, err)
}
