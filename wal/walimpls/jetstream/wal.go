package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// Stream metadata keys.
const (
	metaChannel   = "consumerd.channel"   // the channel name the stream serves
	metaTruncated = "consumerd.truncated" // the id Truncate removed everything below
)

// maxConflictRetries bounds how often one append of a fenced writer is
// re-sent after another writer of the same (or no) term moved the stream's
// last sequence under it.
const maxConflictRetries = 8

// pending is one append waiting for its acknowledgement.
type pending struct {
	m     *nats.Msg
	msgID string // fenced writers: Nats-Msg-Id, stable across re-sends
	fut   jetstream.PubAckFuture
	err   error // failed before (or instead of) publishing
	cb    func(message.MessageID, error)
	tries int // conflict re-sends so far
}

// walImpl is one open channel. Appends are published asynchronously in call
// order; a single goroutine (run) waits for their acknowledgements in that
// order, calls the callbacks, and — for fenced writers — re-synchronises the
// expected last sequence after a conflict.
type walImpl struct {
	o    *opener
	n    names
	st   jetstream.Stream
	term uint64
	log  hclog.Logger

	mu        sync.Mutex
	closed    bool
	fencedErr error  // set once fenced; wraps walimpls.ErrFenced
	expected  uint64 // fenced writers: stream last sequence the next append expects, when chain is ""
	chain     string // fenced writers: Nats-Msg-Id of the append sent last ("" right after a sync)
	idPrefix  string // fenced writers: unique prefix of generated Nats-Msg-Ids
	idSeq     uint64
	resyncing bool       // fenced writers: appends wait in held
	held      []*pending // appends made during a resync
	queue     []*pending // published (or failed) appends, in call order
	scanners  map[*scanner]struct{}
	started   bool

	wake     chan struct{} // nudges run; capacity 1
	closing  chan struct{} // closed by Close: run drains the queue and exits
	kill     chan struct{} // closed if draining takes too long: stop waiting for acks
	loopDone chan struct{}
}

var (
	_ walimpls.WALImpls      = (*walImpl)(nil)
	_ walimpls.AsyncAppender = (*walImpl)(nil)
)

func newWAL(o *opener, n names, st jetstream.Stream, term uint64) *walImpl {
	return &walImpl{
		o:        o,
		n:        n,
		st:       st,
		term:     term,
		log:      o.log.With("channel", n.channel, "term", term),
		idPrefix: randomID(),
		scanners: map[*scanner]struct{}{},
		wake:     make(chan struct{}, 1),
		closing:  make(chan struct{}),
		kill:     make(chan struct{}),
		loopDone: make(chan struct{}),
	}
}

func (w *walImpl) start() {
	w.mu.Lock()
	w.started = true
	w.mu.Unlock()
	go w.run()
}

// WALName is "jetstream".
func (w *walImpl) WALName() string { return BackendName }

// Channel is the channel name.
func (w *walImpl) Channel() string { return w.n.channel }

func (w *walImpl) fenced(by uint64) error {
	return fmt.Errorf("jetstream: channel %q: term %d superseded by term %d: %w", w.n.channel, w.term, by, walimpls.ErrFenced)
}

// readFence returns the sequence and term of the channel's latest fence
// record, or zeros when there is none.
func (w *walImpl) readFence(ctx context.Context) (seq, term uint64, err error) {
	raw, err := w.st.GetLastMsgForSubject(ctx, w.n.fence)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("jetstream: channel %q: read fence record: %w", w.n.channel, err)
	}
	term, err = parseTerm(w.n.channel, raw.Sequence, raw.Header, raw.Data)
	return raw.Sequence, term, err
}

// lastSeqAndFence reads the stream's last sequence and then the fence term.
// The order matters: a fence written after the first read has a higher
// sequence, so an append conditional on last fails; a fence written before it
// is seen by the second read.
func (w *walImpl) lastSeqAndFence(ctx context.Context) (last, term uint64, err error) {
	info, err := w.st.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("jetstream: channel %q: stream info: %w", w.n.channel, err)
	}
	_, term, err = w.readFence(ctx)
	return info.State.LastSeq, term, err
}

// fence runs at Open for a term > 0: it makes this writer's term the
// channel's current term (appending a fence record, conditional on the last
// fence record it read, so racing fences are ordered), or notes that a higher
// term already fenced it.
func (w *walImpl) fence(ctx context.Context) error {
	for attempt := 0; attempt < maxConflictRetries; attempt++ {
		fseq, fterm, err := w.readFence(ctx)
		if err != nil {
			return err
		}
		switch {
		case w.term < fterm:
			w.fencedErr = w.fenced(fterm)
			w.log.Info("opened with a superseded term; appends will fail", "current_term", fterm)
			return nil
		case w.term == fterm:
			// Reopen with the current term: continue after whatever is there.
			last, t2, err := w.lastSeqAndFence(ctx)
			if err != nil {
				return err
			}
			if t2 > w.term {
				w.fencedErr = w.fenced(t2)
				return nil
			}
			w.expected, w.chain = last, ""
			return nil
		}
		tv := strconv.FormatUint(w.term, 10)
		m := &nats.Msg{Subject: w.n.fence, Data: []byte(tv), Header: nats.Header{termHeader: []string{tv}}}
		ack, err := w.o.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(fseq))
		if err == nil {
			w.expected, w.chain = ack.Sequence, ""
			w.log.Info("fenced lower terms", "previous_term", fterm, "fence_seq", ack.Sequence)
			return nil
		}
		if !isWrongLastSeq(err) {
			return fmt.Errorf("jetstream: channel %q: write fence record for term %d on %s: %w", w.n.channel, w.term, w.o.cfg.URL, err)
		}
		// Another fence landed first; look again.
	}
	return fmt.Errorf("jetstream: channel %q: could not write fence record for term %d: %d conflicting fences", w.n.channel, w.term, maxConflictRetries)
}

// errCodeWrongLastMsgID is the server's JSStreamWrongLastMsgIDErrF (nats.go
// has no constant for it).
const errCodeWrongLastMsgID jetstream.ErrorCode = 10070

// isWrongLastSeq reports a conditional append rejected because the stream
// moved: wrong last sequence (single server or replicated) or wrong last
// Nats-Msg-Id.
func isWrongLastSeq(err error) bool {
	var jsErr jetstream.JetStreamError
	if errors.As(err, &jsErr) && jsErr.APIError() != nil {
		switch jsErr.APIError().ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant, errCodeWrongLastMsgID:
			return true
		}
	}
	return false
}

// Append stores msg and waits for the acknowledgement.
func (w *walImpl) Append(ctx context.Context, msg message.MutableMessage) (message.MessageID, error) {
	type result struct {
		id  message.MessageID
		err error
	}
	ch := make(chan result, 1)
	w.AppendAsync(ctx, msg, func(id message.MessageID, err error) { ch <- result{id, err} })
	select {
	case r := <-ch:
		return r.id, r.err
	case <-ctx.Done():
		return 0, fmt.Errorf("jetstream: append to channel %q: %w (the message may have been stored)", w.n.channel, ctx.Err())
	}
}

// AppendAsync publishes msg and calls cb with its id once acknowledged (see
// walimpls.AsyncAppender). Term-0 appends are unconditional; appends of a
// term > 0 are conditional on the stream's last sequence, which the writer
// tracks itself so that appends pipeline.
func (w *walImpl) AppendAsync(ctx context.Context, msg message.MutableMessage, cb func(message.MessageID, error)) {
	if err := ctx.Err(); err != nil {
		cb(0, fmt.Errorf("jetstream: append to channel %q: %w", w.n.channel, err))
		return
	}
	p := &pending{m: encodeMessage(w.n.data, &msg), cb: cb}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		cb(0, fmt.Errorf("jetstream: append to channel %q: %w", w.n.channel, walimpls.ErrClosed))
		return
	}
	if w.fencedErr != nil {
		err := w.fencedErr
		w.mu.Unlock()
		cb(0, err)
		return
	}
	if w.resyncing {
		w.held = append(w.held, p)
		w.mu.Unlock()
		return
	}
	w.publishLocked(ctx, p)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// publishLocked sends p (conditional on w.expected for a fenced writer) and
// queues it. Called with w.mu held, so queue order is wire order.
func (w *walImpl) publishLocked(ctx context.Context, p *pending) {
	if w.term > 0 {
		if p.msgID == "" {
			p.msgID = p.m.Header.Get(jetstream.MsgIDHeader) // the caller's DedupeID
			if p.msgID == "" {
				w.idSeq++
				p.msgID = w.idPrefix + strconv.FormatUint(w.idSeq, 36)
			}
		}
		setChain(p.m, p.msgID, w.chain, w.expected)
	}
	if max := w.o.nc.MaxPayload(); max > 0 {
		if total, hdr := wireSize(p.m); int64(total) > max {
			p.err = walimpls.Permanent(fmt.Errorf(
				"jetstream: append to channel %q: message of %d bytes (payload %d + headers %d) exceeds the NATS server's max_payload of %d bytes",
				w.n.channel, total, len(p.m.Data), hdr, max))
			w.queue = append(w.queue, p)
			return
		}
	}
	for {
		fut, err := w.o.js.PublishMsgAsync(p.m)
		if err == nil {
			p.fut = fut
			if w.term > 0 {
				w.chain = p.msgID
			}
			break
		}
		if errors.Is(err, jetstream.ErrTooManyStalledMsgs) && ctx.Err() == nil && !w.killed() {
			continue // backpressure: MaxPending acks outstanding
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			err = walimpls.Permanent(err)
		}
		p.err = fmt.Errorf("jetstream: append to channel %q on %s: %w", w.n.channel, w.o.cfg.URL, err)
		break
	}
	w.queue = append(w.queue, p)
}

func (w *walImpl) killed() bool {
	select {
	case <-w.kill:
		return true
	default:
		return false
	}
}

// run delivers acknowledgements in call order until Close drains the queue.
func (w *walImpl) run() {
	defer close(w.loopDone)
	for {
		p := w.pop(true)
		if p == nil {
			return
		}
		id, err, conflict := w.await(p)
		if conflict {
			w.resync(p)
			continue
		}
		p.cb(id, err)
	}
}

// pop takes the oldest queued append; with wait it blocks until there is one
// or the WAL is closed and drained (then it returns nil).
func (w *walImpl) pop(wait bool) *pending {
	for {
		w.mu.Lock()
		if len(w.queue) > 0 {
			p := w.queue[0]
			w.queue[0] = nil
			w.queue = w.queue[1:]
			w.mu.Unlock()
			return p
		}
		closed := w.closed
		w.mu.Unlock()
		if closed || !wait {
			return nil
		}
		select {
		case <-w.wake:
		case <-w.closing:
		}
	}
}

// await waits for p's outcome. conflict reports a fenced writer's append
// rejected for a wrong last sequence.
func (w *walImpl) await(p *pending) (message.MessageID, error, bool) {
	if p.err != nil {
		return 0, p.err, false
	}
	select {
	case ack := <-p.fut.Ok():
		return message.MessageID(ack.Sequence), nil, false
	case err := <-p.fut.Err():
		if w.term > 0 && isWrongLastSeq(err) {
			return 0, nil, true
		}
		return 0, fmt.Errorf("jetstream: append to channel %q on %s: %w", w.n.channel, w.o.cfg.URL, err), false
	case <-w.kill:
		return 0, fmt.Errorf("jetstream: append to channel %q: no acknowledgement before close: %w", w.n.channel, walimpls.ErrClosed), false
	}
}

// resync handles a fenced writer's append rejected for a wrong last
// sequence: it holds new appends, collects the outcome of every append
// already sent, reads the last sequence and the fence term, and then either
// fails everything with ErrFenced (a higher term exists) or re-sends the
// rejected appends, then the held ones, in call order. Appends are chained
// (see setChain), so once one is rejected every later one in flight is
// rejected too, and re-sending keeps call order.
func (w *walImpl) resync(first *pending) {
	w.mu.Lock()
	w.resyncing = true
	w.mu.Unlock()

	retry := []*pending{first}
	for {
		p := w.pop(false)
		if p == nil {
			break
		}
		id, err, conflict := w.await(p)
		if conflict {
			retry = append(retry, p)
		} else {
			p.cb(id, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), w.o.cfg.AckTimeout)
	last, fterm, err := w.lastSeqAndFence(ctx)
	cancel()

	w.mu.Lock()
	all := append(retry, w.held...)
	w.held = nil
	w.resyncing = false
	var fail error
	switch {
	case err != nil:
		fail = fmt.Errorf("jetstream: append to channel %q: resynchronising after a conflicting append: %w", w.n.channel, err)
	case fterm > w.term:
		w.fencedErr = w.fenced(fterm)
		fail = w.fencedErr
		w.log.Info("fenced by a higher term", "current_term", fterm)
	default:
		w.log.Debug("another writer appended; re-sending", "last_seq", last, "resent", len(retry))
		w.expected = last
	}
	w.chain = ""
	for i, p := range all {
		p.fut = nil
		switch {
		case fail != nil:
			p.err = fail
			w.queue = append(w.queue, p)
		case i < len(retry) && p.tries >= maxConflictRetries:
			p.err = fmt.Errorf("jetstream: append to channel %q: rejected %d times because another writer with term %d or no term keeps appending",
				w.n.channel, p.tries+1, w.term)
			w.queue = append(w.queue, p)
		default:
			if i < len(retry) {
				p.tries++
			}
			w.publishLocked(context.Background(), p)
		}
	}
	w.mu.Unlock()
}

// LastID is the sequence of the last message on the data subject, or 0.
func (w *walImpl) LastID(ctx context.Context) (message.MessageID, error) {
	ctx, cancel := w.o.reqCtx(ctx)
	defer cancel()
	raw, err := w.st.GetLastMsgForSubject(ctx, w.n.data)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("jetstream: channel %q: last id: %w", w.n.channel, err)
	}
	return message.MessageID(raw.Sequence), nil
}

// truncatedBelow reads the truncation point from stream metadata (0: none).
func truncatedBelow(md map[string]string) uint64 {
	v, err := strconv.ParseUint(md[metaTruncated], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// Truncate removes every message with an id below id: it records the point in
// the stream's metadata (so reads below it fail with ErrTruncated), then
// purges the data subject below it. Fence records are kept. A point beyond
// the last sequence is clamped to last+1.
func (w *walImpl) Truncate(ctx context.Context, id message.MessageID) error {
	if id <= 1 {
		return nil
	}
	ctx, cancel := w.o.reqCtx(ctx)
	defer cancel()
	w.o.truncMu.Lock()
	info, err := w.st.Info(ctx)
	if err != nil {
		w.o.truncMu.Unlock()
		return fmt.Errorf("jetstream: truncate channel %q: stream info: %w", w.n.channel, err)
	}
	limit := min(uint64(id), info.State.LastSeq+1)
	cur := truncatedBelow(info.Config.Metadata)
	if limit > cur {
		cfg := info.Config
		md := make(map[string]string, len(cfg.Metadata)+1)
		for k, v := range cfg.Metadata {
			md[k] = v
		}
		md[metaTruncated] = strconv.FormatUint(limit, 10)
		cfg.Metadata = md
		if _, err := w.o.js.UpdateStream(ctx, cfg); err != nil {
			w.o.truncMu.Unlock()
			return fmt.Errorf("jetstream: truncate channel %q: record truncation point %d: %w", w.n.channel, limit, err)
		}
	}
	w.o.truncMu.Unlock()
	limit = max(limit, cur)
	if err := w.st.Purge(ctx, jetstream.WithPurgeSubject(w.n.data), jetstream.WithPurgeSequence(limit)); err != nil {
		return fmt.Errorf("jetstream: truncate channel %q below %d: purge: %w", w.n.channel, limit, err)
	}
	return nil
}

// Close stops new appends, waits (up to AckTimeout) for acknowledgements of
// appends in flight, closes scanners, and releases the WAL.
func (w *walImpl) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	scanners := make([]*scanner, 0, len(w.scanners))
	for s := range w.scanners {
		scanners = append(scanners, s)
	}
	started := w.started
	w.mu.Unlock()
	close(w.closing)
	for _, s := range scanners {
		_ = s.Close()
	}
	if started {
		t := time.NewTimer(w.o.cfg.AckTimeout + time.Second)
		select {
		case <-w.loopDone:
		case <-t.C:
			w.log.Warn("appends still unacknowledged at close; failing them")
			close(w.kill)
			<-w.loopDone
		}
		t.Stop()
	}
	w.o.forget(w)
}

// randomID returns a random prefix for generated Nats-Msg-Ids.
func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "cd" + hex.EncodeToString(b[:]) + "-"
}
