package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// Stream metadata keys.
const (
	metaChannel   = "consumerd.channel"   // the channel name the stream serves
	metaTruncated = "consumerd.truncated" // the id Truncate removed everything below
)

// maxFenceConflicts bounds how often Open re-reads the fence after another
// writer's fence record landed first.
const maxFenceConflicts = 8

// walImpl is one open channel. See append.go for the append paths.
type walImpl struct {
	o    *opener
	n    names
	st   jetstream.Stream
	term uint64
	log  hclog.Logger
	// maxMsgSize is the stream's max_msg_size when the WAL was opened or
	// last re-read (<= 0: none); see limits.go.
	maxMsgSize atomic.Int32

	mu         sync.Mutex
	closed     bool
	batchReady bool  // the stream takes batches (ensureBatches)
	fencedErr  error // set once fenced; wraps walimpls.ErrFenced
	scanners   map[*scanner]struct{}

	// inflight counts appends accepted and not yet reported, for Close.
	inflight sync.WaitGroup
	kill     chan struct{} // closed when Close gives up waiting for replies

	// Fenced writers (term > 0), see fenced.go. sendMu serialises sends and
	// guards the chain; cmu guards what the reply handlers update too.
	sendMu   sync.Mutex
	expected uint64 // stream last sequence the next append expects, when chain is ""
	chain    string // Nats-Msg-Id of the append sent last ("" right after a sync)
	idPrefix string // unique prefix of generated Nats-Msg-Ids
	idSeq    uint64 // counter behind idPrefix
	cmu      sync.Mutex
	slots    chan struct{} // one token per append without an outcome (maxFencedInFlight)
	sent     int           // appends sent whose outcome was not reported yet
	broken   bool          // an append failed since the last resync
}

var (
	_ walimpls.WALImpls      = (*walImpl)(nil)
	_ walimpls.AsyncAppender = (*walImpl)(nil)
)

func newWAL(o *opener, n names, st jetstream.Stream, term uint64) *walImpl {
	w := &walImpl{
		o:        o,
		n:        n,
		st:       st,
		term:     term,
		log:      o.log.With("channel", n.channel, "term", term),
		idPrefix: randomID(),
		scanners: map[*scanner]struct{}{},
		kill:     make(chan struct{}),
		slots:    make(chan struct{}, maxFencedInFlight),
	}
	if info := st.CachedInfo(); info != nil {
		w.maxMsgSize.Store(info.Config.MaxMsgSize)
	}
	return w
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
	for attempt := 0; attempt < maxFenceConflicts; attempt++ {
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
		last, err := w.writeFence(ctx, fseq)
		if err == nil {
			w.expected, w.chain = last, ""
			w.log.Debug("fenced lower terms", "previous_term", fterm, "fence_last_seq", last)
			if w.seqChains() {
				w.dropOldFences(ctx)
			}
			return nil
		}
		if !isWrongLastSeq(err) {
			return fmt.Errorf("jetstream: channel %q: write fence record for term %d on %s: %w", w.n.channel, w.term, w.o.cfg.URL, err)
		}
		// Another fence landed first; look again.
	}
	return fmt.Errorf("jetstream: channel %q: could not write fence record for term %d: %d conflicting fences", w.n.channel, w.term, maxFenceConflicts)
}

// LastID is the sequence of the last message on the data subject, or 0.
func (w *walImpl) LastID(ctx context.Context) (_ message.MessageID, err error) {
	ctx, end := w.o.request(ctx)
	defer end(&err)
	return w.lastID(ctx, nil)
}

// lastID is LastID's answer; info, when not nil, is the stream's, read
// under the same request.
func (w *walImpl) lastID(ctx context.Context, info *jetstream.StreamInfo) (message.MessageID, error) {
	raw, err := w.st.GetLastMsgForSubject(ctx, w.n.data)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		// No message left: none was ever appended, or Truncate removed them
		// all. LastID must not go down, so it is then the last id removed.
		if info == nil {
			if info, err = w.st.Info(ctx); err != nil {
				return 0, fmt.Errorf("jetstream: channel %q: last id: stream info: %w", w.n.channel, err)
			}
		}
		if t := truncatedBelow(info.Config.Metadata); t > 1 {
			return message.MessageID(t - 1), nil
		}
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("jetstream: channel %q: last id: %w", w.n.channel, err)
	}
	return message.MessageID(raw.Sequence), nil
}

// Bounds implements walimpls.WALImpls. The incarnation is the stream's
// creation time, which a stream deleted and created again does not keep.
func (w *walImpl) Bounds(ctx context.Context) (_ walimpls.Bounds, err error) {
	ctx, end := w.o.request(ctx)
	defer end(&err)
	info, err := w.st.Info(ctx)
	if err != nil {
		return walimpls.Bounds{}, fmt.Errorf("jetstream: channel %q: bounds: stream info: %w", w.n.channel, err)
	}
	last, err := w.lastID(ctx, info)
	if err != nil {
		return walimpls.Bounds{}, err
	}
	return boundsOf(info, last), nil
}

// boundsOf is the channel's Bounds from its stream's info and last id.
// First is the stream's first sequence, or the truncation point when
// higher: every sequence below it was removed, every one from it on is
// held. It may be a record that is not a message (a fence, a marker),
// which a reader skips: it is not counted as removed, so a reader whose
// next id is such a record lost nothing.
func boundsOf(info *jetstream.StreamInfo, last message.MessageID) walimpls.Bounds {
	b := walimpls.Bounds{Incarnation: incarnationOf(info), Last: last, First: last + 1}
	from := max(info.State.FirstSeq, truncatedBelow(info.Config.Metadata), 1)
	if info.State.Msgs > 0 && from <= uint64(last) {
		b.First = message.MessageID(from)
	}
	return b
}

// incarnationOf names the life of a stream: its creation time.
func incarnationOf(info *jetstream.StreamInfo) string {
	return info.Created.UTC().Format(time.RFC3339Nano)
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
func (w *walImpl) Truncate(ctx context.Context, id message.MessageID) (err error) {
	if id <= 1 {
		return nil
	}
	if !w.o.metadata {
		// Without the recorded point a read from a removed position would
		// silently start at the first message left: refuse instead.
		return walimpls.Permanent(fmt.Errorf("jetstream: truncate channel %q: nats-server %s keeps no stream metadata, where the truncation point is recorded (2.10 or newer does): %w",
			w.n.channel, w.o.nc.ConnectedServerVersion(), errors.ErrUnsupported))
	}
	ctx, end := w.o.request(ctx)
	defer end(&err)
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
// appends in flight (failing the rest with ErrClosed), closes scanners, and
// releases the WAL.
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
	w.mu.Unlock()
	for _, s := range scanners {
		_ = s.Close()
	}
	drained := make(chan struct{})
	go func() { // owned here: ends when the last append in flight is reported
		w.inflight.Wait()
		close(drained)
	}()
	t := time.NewTimer(w.o.cfg.AckTimeout + time.Second)
	select {
	case <-drained:
	case <-t.C:
		w.log.Warn("appends still unacknowledged at close; failing them")
		close(w.kill)
		w.o.failPending(w, fmt.Errorf("jetstream: append to channel %q: no acknowledgement before close: %w", w.n.channel, walimpls.ErrClosed))
		<-drained
	}
	t.Stop()
	w.o.forget(w)
}

// randomID returns a random prefix for generated Nats-Msg-Ids.
func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "cd" + hex.EncodeToString(b[:]) + "-"
}

// Count is the number of messages on the channel's data subject.
func (w *walImpl) Count(ctx context.Context) (_ uint64, err error) {
	ctx, end := w.o.request(ctx)
	defer end(&err)
	info, err := w.st.Info(ctx, jetstream.WithSubjectFilter(w.n.data))
	if err != nil {
		return 0, fmt.Errorf("jetstream: count channel %q: stream info: %w", w.n.channel, err)
	}
	return info.State.Subjects[w.n.data], nil
}
