package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

const (
	// defaultReadAhead is the scanner buffer when ReadOption leaves it to us.
	defaultReadAhead = 1024
	// scanHeartbeat is the idle heartbeat scanners ask the server for.
	scanHeartbeat = time.Second
)

// Read opens an ordered consumer on the channel's data subject (fence records
// are never delivered) at opt.DeliverPolicy. A start position below the
// truncation point fails with ErrTruncated.
func (w *walImpl) Read(ctx context.Context, opt walimpls.ReadOption) (_ walimpls.ScannerImpls, err error) {
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("jetstream: read channel %q: %w", w.n.channel, walimpls.ErrClosed)
	}
	rctx, end := w.o.request(ctx)
	defer end(&err)
	info, err := w.st.Info(rctx)
	if err != nil {
		return nil, fmt.Errorf("jetstream: read channel %q: stream info: %w", w.n.channel, err)
	}
	next, err := w.startSeq(info, opt) // the first sequence the scanner must not skip past
	if err != nil {
		return nil, err
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{w.n.data},
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: next}
	cons, err := w.st.OrderedConsumer(rctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("jetstream: read channel %q: ordered consumer: %w", w.n.channel, err)
	}
	buf := opt.ReadAheadBufferSize
	if buf <= 0 {
		buf = defaultReadAhead
	}
	sctx, scancel := context.WithCancel(context.Background())
	s := &scanner{
		w:      w,
		name:   opt.Name,
		ch:     make(chan message.ImmutableMessage, min(buf, 256)),
		stop:   make(chan struct{}),
		failed: make(chan struct{}),
		done:   make(chan struct{}),
		ctx:    sctx,
		cancel: scancel,
		next:   next,
		verify: opt.Verify,
		inc:    opt.Incarnation,
	}
	if s.verify {
		s.recheckCh = make(chan struct{}, 1)
	}
	// Consume, not Messages: nats.go's MessagesContext.Next arms a fresh
	// heartbeat timer (time.AfterFunc) per message, a cost a pass-through
	// query feels; Consume keeps one timer per pull and resets it.
	//
	// A short idle heartbeat: if a pull request is lost (e.g. sent before a
	// cluster route learned of a just-created consumer), the missing
	// heartbeats make the ordered consumer recreate itself within seconds
	// instead of after nats.go's default 30 s expiry.
	//
	// A verifying scanner hears of the consumer's errors (deleted with its
	// stream, heartbeats missed): nats.go then re-creates the consumer
	// after the last sequence delivered, which in a re-created or restored
	// stream numbers other messages, so the position is checked again.
	opts := []jetstream.PullConsumeOpt{jetstream.PullMaxMessages(buf), jetstream.PullHeartbeat(scanHeartbeat)}
	if s.verify {
		opts = append(opts, jetstream.ConsumeErrHandler(func(jetstream.ConsumeContext, error) { s.requestRecheck() }))
	}
	cc, err := cons.Consume(s.handle, opts...)
	if err != nil {
		scancel()
		return nil, fmt.Errorf("jetstream: read channel %q: start consumer: %w", w.n.channel, err)
	}
	s.cc = cc
	consumerDone := cc.Closed()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		s.halt()
		<-consumerDone
		return nil, fmt.Errorf("jetstream: read channel %q: %w", w.n.channel, walimpls.ErrClosed)
	}
	w.scanners[s] = struct{}{}
	w.mu.Unlock()
	go s.run(consumerDone)
	return s, nil
}

// startSeq is the stream sequence a scanner of opt starts at, from the
// stream's info: ErrTruncated below the truncation point.
func (w *walImpl) startSeq(info *jetstream.StreamInfo, opt walimpls.ReadOption) (uint64, error) {
	trunc := truncatedBelow(info.Config.Metadata)
	var seq uint64
	switch dp := opt.DeliverPolicy; dp.Kind {
	case walimpls.DeliverKindAll:
		seq = max(trunc, 1)
		if opt.Verify {
			// From the first record held: nothing below it is a gap to check.
			seq = max(seq, info.State.FirstSeq)
		}
	case walimpls.DeliverKindLatest:
		// After the last sequence the stream's leader reported, not
		// DeliverNew: a consumer created on a replica that has not applied
		// the latest appends yet would start below them and deliver history.
		seq = max(trunc, info.State.LastSeq+1)
	case walimpls.DeliverKindStartFrom:
		seq = max(uint64(dp.ID), 1)
	case walimpls.DeliverKindStartAfter:
		seq = uint64(dp.ID) + 1
	default:
		return 0, fmt.Errorf("jetstream: read channel %q: unknown deliver policy kind %d", w.n.channel, dp.Kind)
	}
	if seq < trunc {
		return 0, fmt.Errorf("jetstream: read channel %q from %d: messages below %d were removed: %w",
			w.n.channel, seq, trunc, walimpls.ErrTruncated)
	}
	return seq, nil
}

// scanner delivers one ordered consumer's messages on ch. nats.go calls
// handle for each message, one at a time and in order, on the
// subscription's goroutine; run owns the scanner's end.
type scanner struct {
	w      *walImpl
	name   string
	cc     jetstream.ConsumeContext
	ch     chan message.ImmutableMessage
	stop   chan struct{} // closed by halt
	failed chan struct{} // closed by handle, failErr set
	done   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once

	sendMu  sync.Mutex // held by handle while it delivers
	ended   bool       // under sendMu: nothing more is delivered (ch closes, or a delivery failed)
	next    uint64     // handle's: sequence expected next (0 = unknown); a larger one is a gap
	failErr error      // set by handle before it closes failed

	// A verifying scanner's (ReadOption.Verify): the incarnation its
	// position belongs to, and a check of the position asked for by a
	// consumer error or a reconnect (recheck), done by the next delivery
	// or by run, whichever comes first (recheckCh wakes run).
	verify    bool
	inc       string
	recheck   atomic.Bool
	recheckCh chan struct{}

	errMu sync.Mutex
	err   error // why it stopped; set before ch is closed
}

var _ walimpls.ScannerImpls = (*scanner)(nil)

func (s *scanner) Name() string                          { return s.name }
func (s *scanner) Chan() <-chan message.ImmutableMessage { return s.ch }
func (s *scanner) Done() <-chan struct{}                 { return s.done }

// Error says why the scanner stopped; nil while it runs. It is set before
// Chan is closed.
func (s *scanner) Error() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// Close stops the scanner and waits for it. Safe to call more than once.
func (s *scanner) Close() error {
	s.halt()
	<-s.done
	return nil
}

// halt stops delivery: a handle blocked on ch returns, and the consumer
// stops pulling.
func (s *scanner) halt() {
	s.once.Do(func() {
		close(s.stop)
		s.cancel()
		s.cc.Stop()
	})
}

func (s *scanner) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// run waits for the scanner's end — Close, a failed delivery, a failed
// check of a verifying scanner's position, or the consumer stopping by
// itself — and then closes ch once no handle can send on it any more.
func (s *scanner) run(closed <-chan struct{}) {
	err := s.await(closed)
	if s.stopped() {
		err = walimpls.ErrScannerClosed
	}
	s.halt()
	s.sendMu.Lock() // a handle in progress returns: stop is closed
	s.ended = true
	s.sendMu.Unlock()
	s.errMu.Lock()
	s.err = err
	s.errMu.Unlock()
	close(s.ch)
	<-closed
	s.w.mu.Lock()
	delete(s.w.scanners, s)
	s.w.mu.Unlock()
	close(s.done)
}

// recheckRetry is how soon run checks a verifying scanner's position again
// after a check that got no answer.
const recheckRetry = time.Second

// await waits for the scanner's end and says why it ended (nil: Close).
// Meanwhile it checks a verifying scanner's position when asked to, so a
// loss is found even when no message comes to show it (a stream re-created
// shorter than the position).
func (s *scanner) await(closed <-chan struct{}) error {
	var retry <-chan time.Time
	for {
		select {
		case <-s.stop:
			return nil
		case <-s.failed:
			return s.failErr
		case <-closed:
			return fmt.Errorf("jetstream: scanner %q on channel %q: the ordered consumer stopped without Close (its connection closed?)", s.name, s.w.n.channel)
		case <-s.recheckCh:
		case <-retry:
		}
		retry = nil
		switch err := s.recheckNow(); {
		case errors.Is(err, walimpls.ErrChannelLost):
			return err
		case err != nil:
			s.w.log.Debug("checking the scanner's position", "scanner", s.name, "error", err)
			retry = time.After(recheckRetry)
		}
	}
}

// requestRecheck asks for a check of a verifying scanner's position; it
// never blocks (nats.go calls it holding its consumer's lock).
func (s *scanner) requestRecheck() {
	if !s.verify {
		return
	}
	s.recheck.Store(true)
	select {
	case s.recheckCh <- struct{}{}:
	default:
	}
}

// recheckNow does an asked-for check of the position, unless a delivery
// did it first. A loss ends delivery at once.
func (s *scanner) recheckNow() error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.ended || !s.recheck.Load() {
		return nil
	}
	err := s.verifyPosition(nil, 0)
	switch {
	case err == nil:
		s.recheck.Store(false)
	case errors.Is(err, walimpls.ErrChannelLost):
		s.ended = true
	}
	return err
}

// handle delivers one message on ch, or fails the scanner. After a message
// it could not deliver it delivers none: nats.go goes on calling it until
// run stops the consumer, and a later message must not pass the failed one
// (a failed gap check, say, would otherwise turn into a skip).
func (s *scanner) handle(m jetstream.Msg) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.ended {
		return
	}
	if err := s.deliver(m); err != nil {
		s.ended = true
		s.failErr = err
		close(s.failed)
	}
}

func (s *scanner) deliver(m jetstream.Msg) error {
	seq, ts, ok := parseAckReply(m.Reply())
	if !ok {
		md, err := m.Metadata()
		if err != nil {
			return walimpls.Permanent(fmt.Errorf("jetstream: scanner %q on channel %q: message metadata: %w", s.name, s.w.n.channel, err))
		}
		seq, ts = md.Sequence.Stream, md.Timestamp
	}
	if s.verify && s.recheck.Load() {
		if err := s.verifyPosition(nil, 0); err != nil {
			return err
		}
		s.recheck.Store(false)
	}
	if s.next != 0 && seq != s.next {
		if err := s.checkGap(seq); err != nil {
			return err
		}
	}
	s.next = seq + 1
	im, err := decodeMessage(s.w.n.channel, seq, ts, m.Headers(), m.Data())
	if err != nil {
		return walimpls.Permanent(err) // a damaged message reads the same next time
	}
	select {
	case s.ch <- im:
		return nil
	case <-s.stop:
		return walimpls.ErrScannerClosed
	}
}

// checkGap runs when the consumer skipped from s.next to seq. Gaps are normal
// (fence records, markers); they are an error only if the skipped positions
// were truncated while the scanner was behind, or, for a verifying scanner,
// removed some other way or renumbered (verifyPosition) — never a silent
// skip. An unanswered look-up fails retryably (request), like every other
// request: the chaos harness found a shard FAILED by a gap check that timed
// out while its member's link flapped.
func (s *scanner) checkGap(seq uint64) (err error) {
	ctx, end := s.w.o.request(s.ctx)
	defer end(&err)
	info, err := s.w.st.Info(ctx)
	if err != nil {
		if s.verify && errors.Is(err, jetstream.ErrStreamNotFound) {
			return s.gone()
		}
		return fmt.Errorf("jetstream: scanner %q on channel %q: check gap %d..%d: %w", s.name, s.w.n.channel, s.next, seq, err)
	}
	if trunc := truncatedBelow(info.Config.Metadata); s.next < trunc {
		return fmt.Errorf("jetstream: scanner %q on channel %q: positions %d..%d were truncated before they were read: %w",
			s.name, s.w.n.channel, s.next, trunc-1, walimpls.ErrTruncated)
	}
	if s.verify {
		return s.verifyPosition(info, seq)
	}
	return nil
}

// verifyPosition checks that the channel still holds a verifying scanner's
// position, the sequence before next, in its incarnation
// (walimpls.CheckPosition). info is the stream's when read already (nil:
// read it); seen is a message sequence just received (0: none), so the
// channel's last id is at least that and need not be asked for unless the
// check fails. Called with sendMu held. A stream that no longer exists is a
// loss; a look-up without an answer is retryable.
func (s *scanner) verifyPosition(info *jetstream.StreamInfo, seen uint64) (err error) {
	ctx, end := s.w.o.request(s.ctx)
	defer end(&err)
	if info == nil {
		if info, err = s.w.st.Info(ctx); err != nil {
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return s.gone()
			}
			return fmt.Errorf("jetstream: scanner %q on channel %q: check position %d: %w", s.name, s.w.n.channel, s.next-1, err)
		}
	}
	after := message.MessageID(s.next - 1)
	if seen > 0 && walimpls.CheckPosition(s.w.n.channel, after, s.inc, boundsOf(info, message.MessageID(seen))) == nil {
		return nil
	}
	last, err := s.w.lastID(ctx, info)
	if err != nil {
		return fmt.Errorf("jetstream: scanner %q: check position %d: %w", s.name, after, err)
	}
	return walimpls.CheckPosition(s.w.n.channel, after, s.inc, boundsOf(info, last))
}

// gone is a verifying scanner's loss of its whole channel.
func (s *scanner) gone() error {
	return &walimpls.LostError{Channel: s.w.n.channel, After: message.MessageID(s.next - 1), Incarnation: s.inc, Gone: true}
}

// parseAckReply extracts the stream sequence and timestamp from a JetStream
// delivery's reply subject without allocating:
//
//	v1: $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
//	v2: $JS.ACK.<domain>.<acchash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>[.<token>]
//
// ok is false for anything else (the caller then uses Msg.Metadata).
func parseAckReply(reply string) (seq uint64, ts time.Time, ok bool) {
	const prefix = "$JS.ACK."
	if !strings.HasPrefix(reply, prefix) {
		return 0, time.Time{}, false
	}
	var tok [12]string
	n := 0
	rest := reply[len(prefix):]
	for n < len(tok) {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			tok[n] = rest
			n++
			break
		}
		tok[n], rest = rest[:i], rest[i+1:]
		n++
	}
	// Token counts after "$JS.ACK.": v1 7, v2 9 or 10.
	var sseq, tsTok string
	switch {
	case n == 7:
		sseq, tsTok = tok[3], tok[5]
	case n == 9 || n == 10:
		sseq, tsTok = tok[5], tok[7]
	default:
		return 0, time.Time{}, false
	}
	seq, err := strconv.ParseUint(sseq, 10, 64)
	if err != nil {
		return 0, time.Time{}, false
	}
	nanos, err := strconv.ParseInt(tsTok, 10, 64)
	if err != nil {
		return 0, time.Time{}, false
	}
	return seq, time.Unix(0, nanos), true
}
