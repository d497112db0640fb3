package jetstream

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// Batches (walimpls.BatchAppender).
//
// A channel's stream also captures <ns>.<token>.mark.<chain>: each chain's
// markers, on a subject of their own (scanners, LastID and Count read the
// data subject only, so markers are never seen as messages). A batch is its
// messages on the data subject plus the marker, conditional on the chain's
// last marker (Nats-Expected-Last-Subject-Sequence = Batch.After), so a stale
// or repeated batch is rejected whole.
//
// On nats-server 2.12 or newer the batch is an atomic batch (stream
// allow_atomic; Nats-Batch-Id, Nats-Batch-Sequence 1..n+1, Nats-Batch-Commit
// on the marker): all of it is stored or none, in one proposal on a
// replicated stream. The messages go out without replies; the marker is a
// request whose reply is the batch's PubAck. A batch abandoned midway (a
// crash before the marker) is dropped by the server.
//
// Older servers have no atomic batches: each message is appended with a
// Nats-Msg-Id derived from the chain, the marker and its index, then the
// marker. A batch cut short is completed by its retry — the repeated
// messages are dropped as duplicates — only within the stream's duplicate
// window (Config.DuplicateWindow). Atomic reports which.

// maxAtomicBatch is nats-server's default max_batch_size, the marker
// included.
const maxAtomicBatch = 1000

// DefaultMaxBatchesInFlight is Config.MaxBatchesInFlight's default.
//
// The server's cost is per atomic batch more than per message: on a
// one-replica file stream it stages each batch in a file store of its own
// (a directory, a metadata file and a block file made and removed, ~2 ms
// of CPU here). A member publishes each shard's outputs on chains of its
// own, one batch in flight per chain, the next gathering what the shard
// committed meanwhile; with hundreds of shards each batch would otherwise
// go out as soon as it is ready, carrying a transaction or two, and the
// member's throughput would fall with its shard count. A few batches in
// flight per connection keep the server busy while the others wait and
// grow; when nothing waits, a batch goes out at once, as before.
const DefaultMaxBatchesInFlight = 4

var _ walimpls.BatchAppender = (*walImpl)(nil)

// AtomicBatchesIn reports whether a server version ("2.12.1") has atomic
// batches.
func AtomicBatchesIn(version string) bool { return versionAtLeast(version, 2, 12) }

// versionAtLeast reports whether version ("2.12.1", "v2.9.10") is at least
// major.minor; an unreadable version is not.
func versionAtLeast(version string, major, minor int) bool {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	return err1 == nil && err2 == nil && (ma > major || ma == major && mi >= minor)
}

// MaxBatch leaves room for the marker in the server's batch size.
func (w *walImpl) MaxBatch() int { return maxAtomicBatch - 1 }

// Atomic reports whether the server stores batches atomically.
func (w *walImpl) Atomic() bool { return w.o.atomic }

func (w *walImpl) markSubject(chain string) (string, error) {
	tok, err := EscapeChannel(chain)
	if err != nil {
		return "", fmt.Errorf("jetstream: channel %q: batch chain: %w", w.n.channel, err)
	}
	return w.n.marks + "." + tok, nil
}

// ensureBatches makes a stream created before batches existed capture the
// marker subjects (and allow atomic batches): once per WAL.
func (w *walImpl) ensureBatches(ctx context.Context) error {
	w.mu.Lock()
	ready := w.batchReady
	w.mu.Unlock()
	if ready {
		return nil
	}
	info, err := w.st.Info(ctx)
	if err != nil {
		return fmt.Errorf("jetstream: channel %q: stream info: %w", w.n.channel, err)
	}
	cfg := info.Config
	want := w.n.marks + ".*"
	if !slices.Contains(cfg.Subjects, want) || (w.o.atomic && !cfg.AllowAtomicPublish) {
		if !slices.Contains(cfg.Subjects, want) {
			cfg.Subjects = append(cfg.Subjects, want)
		}
		cfg.AllowAtomicPublish = w.o.atomic
		if _, err := w.o.js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("jetstream: channel %q: enable batches on stream %s: %w", w.n.channel, w.n.stream, err)
		}
		w.log.Info("stream now takes batches", "stream", w.n.stream, "atomic", w.o.atomic)
	}
	w.mu.Lock()
	w.batchReady = true
	w.mu.Unlock()
	return nil
}

// AppendBatch stores b (see the file comment).
func (w *walImpl) AppendBatch(ctx context.Context, b walimpls.Batch) (res walimpls.BatchResult, err error) {
	if len(b.Messages) > w.MaxBatch() {
		return res, walimpls.Permanent(fmt.Errorf("jetstream: append batch to channel %q: %d messages, at most %d", w.n.channel, len(b.Messages), w.MaxBatch()))
	}
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return res, fmt.Errorf("jetstream: append batch to channel %q: %w", w.n.channel, walimpls.ErrClosed)
	}
	if w.o.atomic {
		// Before the request's own time starts: each batch ahead is
		// bounded by its own.
		select {
		case w.o.batchSlots <- struct{}{}:
			defer func() { <-w.o.batchSlots }()
		case <-ctx.Done():
			return res, fmt.Errorf("jetstream: append batch to channel %q: waiting for one of the %d batches in flight: %w", w.n.channel, cap(w.o.batchSlots), ctx.Err())
		}
	}
	ctx, end := w.o.request(ctx)
	defer end(&err)
	subj, err := w.markSubject(b.Chain)
	if err != nil {
		return res, walimpls.Permanent(err)
	}
	if err := w.ensureBatches(ctx); err != nil {
		return res, err
	}
	marker := &nats.Msg{Subject: subj, Data: b.Marker, Header: nats.Header{
		jetstream.ExpectedLastSubjSeqHeader: []string{strconv.FormatUint(uint64(b.After), 10)},
	}}
	if w.o.atomic {
		err = w.sendAtomic(b, marker)
	} else {
		res.FirstID, err = w.sendOneByOne(ctx, b, subj)
	}
	if err != nil {
		return res, err
	}
	reply, err := w.o.nc.RequestMsgWithContext(ctx, marker)
	if err != nil {
		return res, fmt.Errorf("jetstream: append batch to channel %q on %s: marker: %w", w.n.channel, w.o.cfg.URL, err)
	}
	seq, err := parsePubAck(reply)
	if err != nil {
		return res, w.batchErr(ctx, b, err)
	}
	res.MarkerID = message.MessageID(seq)
	if n := len(b.Messages); n > 0 && w.o.atomic {
		res.FirstID = res.MarkerID - message.MessageID(n) // one proposal: contiguous
	}
	return res, nil
}

// sendAtomic sends the batch's messages of an atomic batch, without
// replies, and stamps the marker as its commit.
func (w *walImpl) sendAtomic(b walimpls.Batch, marker *nats.Msg) error {
	id := []string{nuid.Next()}                              // one value shared: nats.go only reads it
	m := &nats.Msg{Header: make(nats.Header, encodeHeaders)} // reused: see encodeInto
	for i := range b.Messages {
		encodeInto(m, w.n.data, &b.Messages[i])
		m.Header[batchIDHeader] = id
		m.Header[batchSeqHeader] = batchSeqValue(i + 1)
		if err := w.checkSize(m); err != nil {
			return err
		}
		if err := w.o.nc.PublishMsg(m); err != nil {
			return fmt.Errorf("jetstream: append batch to channel %q on %s: %w", w.n.channel, w.o.cfg.URL, err)
		}
	}
	marker.Header[batchIDHeader] = id
	marker.Header[batchSeqHeader] = batchSeqValue(len(b.Messages) + 1)
	marker.Header[batchCommitHeader] = []string{"1"}
	return nil
}

// sendOneByOne appends the batch's messages with dedupe ids derived from
// the chain, the marker and the index, waiting for each reply (servers
// without atomic batches); it returns the first message's id. It first
// checks the chain's position, so a stale batch stores nothing; two writers
// that pass the check together hold the same batch (the next one after the
// same marker), whose messages the dedupe ids store once.
func (w *walImpl) sendOneByOne(ctx context.Context, b walimpls.Batch, subj string) (message.MessageID, error) {
	last, err := w.lastMarker(ctx, subj, b.Chain)
	if err != nil {
		return 0, err
	}
	if last.ID != b.After {
		return 0, fmt.Errorf("jetstream: append batch to channel %q: chain %s ends at %d, not %d: %w", w.n.channel, b.Chain, last.ID, b.After, walimpls.ErrStaleChain)
	}
	sum := sha256.Sum256(b.Marker)
	var first message.MessageID
	for i := range b.Messages {
		m := b.Messages[i]
		m.DedupeID = fmt.Sprintf("%s/%x/%d", b.Chain, sum[:12], i)
		id, err := w.Append(ctx, m)
		if err != nil {
			return 0, fmt.Errorf("jetstream: append batch to channel %q: message %d: %w", w.n.channel, i, err)
		}
		if i == 0 {
			first = id
		}
	}
	return first, nil
}

// batchSeqValues holds the Nats-Batch-Sequence values 1 … maxAtomicBatch,
// built once and shared read-only by every batch: a message's sequence
// value is then no allocation.
var batchSeqValues = func() [][]string {
	v := make([][]string, maxAtomicBatch+1)
	for i := range v {
		v[i] = []string{strconv.Itoa(i)}
	}
	return v
}()

// batchSeqValue is the header value of batch sequence n (1-based).
func batchSeqValue(n int) []string {
	if n < len(batchSeqValues) {
		return batchSeqValues[n]
	}
	return []string{strconv.Itoa(n)}
}

// Headers of atomic batches.
const (
	batchIDHeader     = "Nats-Batch-Id"
	batchSeqHeader    = "Nats-Batch-Sequence"
	batchCommitHeader = "Nats-Batch-Commit"
)

// Server error codes of atomic batches (nats.go has no constants).
const (
	errCodeBatchIncomplete jetstream.ErrorCode = 10176 // a message of the batch was lost on the way
	errCodeBatchMissingSeq jetstream.ErrorCode = 10175
)

// batchErr maps the marker's error reply: the chain moved (ErrStaleChain);
// a batch the server did not receive whole (retryable: resend it), unless a
// message of it exceeds the stream's max_msg_size now (permanent); any
// other rejection of the request (permanent).
func (w *walImpl) batchErr(ctx context.Context, b walimpls.Batch, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case isWrongLastSeq(err):
		return fmt.Errorf("jetstream: append batch to channel %q: chain %s does not end at %d: %w: %w", w.n.channel, b.Chain, b.After, walimpls.ErrStaleChain, err)
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == errCodeBatchIncomplete || apiErr.ErrorCode == errCodeBatchMissingSeq):
		// The server drops a message of an atomic batch over the stream's
		// max_msg_size and then finds the batch incomplete: a resend fails
		// the same way, forever.
		if lerr := w.recheckLimit(ctx, b, err); lerr != nil {
			return lerr
		}
		return fmt.Errorf("jetstream: append batch to channel %q on %s: %w", w.n.channel, w.o.cfg.URL, err)
	case errors.As(err, &apiErr) && apiErr.Code == http.StatusBadRequest:
		return walimpls.Permanent(fmt.Errorf("jetstream: append batch to channel %q on %s: rejected: %w", w.n.channel, w.o.cfg.URL, err))
	}
	return fmt.Errorf("jetstream: append batch to channel %q on %s: %w", w.n.channel, w.o.cfg.URL, err)
}

// LastMarker reads the chain's last marker.
func (w *walImpl) LastMarker(ctx context.Context, chain string) (_ walimpls.Marker, err error) {
	subj, err := w.markSubject(chain)
	if err != nil {
		return walimpls.Marker{}, walimpls.Permanent(err)
	}
	ctx, end := w.o.request(ctx)
	defer end(&err)
	return w.lastMarker(ctx, subj, chain)
}

func (w *walImpl) lastMarker(ctx context.Context, subj, chain string) (walimpls.Marker, error) {
	raw, err := w.st.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return walimpls.Marker{}, nil
	}
	if err != nil {
		return walimpls.Marker{}, fmt.Errorf("jetstream: channel %q: last marker of chain %s: %w", w.n.channel, chain, err)
	}
	return walimpls.Marker{ID: message.MessageID(raw.Sequence), Payload: raw.Data}, nil
}

// ServerVersion is the connected server's version.
func (o *opener) ServerVersion() string { return o.nc.ConnectedServerVersion() }

// AtomicBatches reports whether the server has atomic batches.
func (o *opener) AtomicBatches() bool { return o.atomic }
