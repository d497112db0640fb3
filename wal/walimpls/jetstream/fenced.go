package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/consumerd/consumerd/wal/walimpls"
)

// A fenced writer's appends (term > 0).
//
// Each append is a link of a chain (setChain): it carries a Nats-Msg-Id (the
// caller's DedupeID, or a generated one) and a condition that holds only if
// nothing else was stored since its predecessor. So once one append is not
// stored, every later one in flight is rejected too: the stored appends are
// always a prefix of the calls. Two forms of the condition, by server:
//
//   - Sequence chains (servers with atomic batches, 2.12+): every link is
//     conditional on the stream's last sequence (Nats-Expected-Last-Sequence),
//     the writer predicting that each of its links takes the next one. A
//     replicated stream checks this before proposing (against the sequence
//     its proposals in flight will reach), so links pipeline. A record
//     stored by someone else shifts the stream by one, and then a later link
//     of the old writer could match the shifted sequence: a newer term's
//     fence therefore takes fencePadding+1 sequences at once (an atomic
//     batch: the fence record and fencePadding copies), and a writer never
//     has more than maxFencedInFlight links without an outcome. Every link a
//     superseded writer sends expects a sequence below fence+maxFencedInFlight-1
//     (it only sends past a link whose success it learnt, and that link was
//     stored before the fence), so none matches once the padded fence is in.
//   - Id chains (older servers): a link after the first is conditional on
//     its predecessor's Nats-Msg-Id being the stream's last
//     (Nats-Expected-Last-Msg-Id). nats-server 2.14 and newer check that
//     header on a replicated stream only when applying the proposal, and a
//     mismatch there is a write error that stops the stream taking writes:
//     that is why servers that can fence with padding use sequences.
//
// The first link after Open or a resync is conditional on the stream's last
// sequence in both forms.
//
// Any failure breaks the chain (breakChain). While outcomes of appends sent
// before the failure are still on their way, further appends fail at once,
// unsent, with a retryable error (errChainBroken): sending them could store
// them ahead of the failed one. Once every outcome is in, the next append
// resynchronises — reads the stream's last sequence and then the fence term
// — and either fails with ErrFenced (a higher term exists) or starts a new
// chain there. The caller (the wal adaptor) re-sends failed appends in call
// order once it has every outcome; a re-send keeps its Nats-Msg-Id, so one
// that was stored although its reply was lost is acknowledged as a
// duplicate with its original sequence instead of being stored twice (on a
// sequence chain a duplicate does not move the stream: its acknowledgement
// breaks the chain, and a link sent after it is rejected and re-sent).

// maxFencedInFlight bounds a fenced writer's appends without an outcome; an
// append beyond it waits for one. fencePadding, the copies of a fence record
// a sequence-chain fence adds, must be at least maxFencedInFlight-1 (see
// above); both stay well under nats-server's default max_batch_size (1000).
const (
	maxFencedInFlight = 512
	fencePadding      = maxFencedInFlight
)

// The build fails if fencePadding is ever lowered below what fencing needs.
var _ [fencePadding - (maxFencedInFlight - 1)]struct{}

// errChainBroken fails a fenced append handed in while the outcomes of
// appends sent before a failure are still on their way.
var errChainBroken = errors.New("an earlier append of this fenced writer failed and outcomes are still in flight; not sent (re-send once every outcome is in)")

// errConflict wraps the rejection of a chained append because something else
// was stored first (another writer's append, a newer term's fence). It is
// retryable: the re-send resynchronises and finds out which.
var errConflict = errors.New("rejected because the stream moved (another writer appended or a newer term fenced the channel)")

// seqChains reports whether this writer's chain is on sequences (see above).
func (w *walImpl) seqChains() bool { return w.o.atomic }

// appendFenced chains p onto the writer's appends and publishes it. Sends
// are serialised on sendMu, so chain order is call order.
func (w *walImpl) appendFenced(ctx context.Context, p *pending, dedupeID string) {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	select {
	case w.slots <- struct{}{}:
	case <-ctx.Done():
		w.breakChain()
		w.refuse(p, fmt.Errorf("jetstream: append to channel %q: waiting for one of %d appends in flight: %w", w.n.channel, maxFencedInFlight, ctx.Err()))
		return
	case <-w.kill:
		w.breakChain()
		w.refuse(p, fmt.Errorf("jetstream: append to channel %q: %w", w.n.channel, walimpls.ErrClosed))
		return
	}
	resync, err := w.beginFenced()
	if err != nil {
		<-w.slots
		w.refuse(p, err) // not counted in flight: the chain stays as it is
		return
	}
	if resync {
		if err := w.resync(ctx); err != nil {
			w.finish(p, 0, err)
			return
		}
	}
	msgID := dedupeID
	if msgID == "" {
		w.idSeq++
		msgID = w.idPrefix + strconv.FormatUint(w.idSeq, 36)
	}
	prev := w.chain
	if w.seqChains() {
		prev, p.next = "", w.expected+1
	}
	setChain(p.m, msgID, prev, w.expected)
	if err := w.publishFast(ctx, p); err != nil {
		w.finish(p, 0, err)
		return
	}
	w.chain = msgID
	w.expected++
}

// beginFenced counts an append in flight, unless the chain is broken with
// outcomes still in flight (errChainBroken). resync says the chain was
// broken and is now settled: the caller must resynchronise before sending.
func (w *walImpl) beginFenced() (resync bool, err error) {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	if w.broken {
		if w.sent > 0 {
			return false, fmt.Errorf("jetstream: append to channel %q: %w", w.n.channel, errChainBroken)
		}
		w.broken = false
		resync = true
	}
	w.sent++
	return resync, nil
}

// settledFenced records a fenced append's outcome; broke breaks the chain.
func (w *walImpl) settledFenced(broke bool) {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	if w.sent > 0 {
		w.sent--
	}
	if broke {
		w.broken = true
	}
	select {
	case <-w.slots: // the slot appendFenced took for it
	default:
	}
}

func (w *walImpl) breakChain() {
	w.cmu.Lock()
	w.broken = true
	w.cmu.Unlock()
}

// resync reads the stream's last sequence and the fence term and starts a new
// chain there, or fails with ErrFenced when a higher term fenced the channel.
// Called with sendMu held and nothing in flight.
func (w *walImpl) resync(ctx context.Context) (err error) {
	rctx, end := w.o.request(ctx)
	defer end(&err)
	last, fterm, err := w.lastSeqAndFence(rctx)
	if err != nil {
		return fmt.Errorf("jetstream: append to channel %q: resynchronising after a failed append: %w", w.n.channel, err)
	}
	if fterm > w.term {
		w.mu.Lock()
		if w.fencedErr == nil {
			w.fencedErr = w.fenced(fterm)
			w.log.Info("fenced by a higher term", "current_term", fterm)
		}
		err := w.fencedErr
		w.mu.Unlock()
		return err
	}
	w.log.Debug("chain resynchronised", "last_seq", last)
	w.expected, w.chain = last, ""
	return nil
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

// writeFence appends the fence record for w.term, conditional on the fence
// subject's last sequence being fseq, and returns the stream sequence the
// writer's chain starts after. With sequence chains it is an atomic batch of
// the record and fencePadding copies (see the file comment), on older
// servers the record alone. A rejection because another fence landed first
// satisfies isWrongLastSeq.
func (w *walImpl) writeFence(ctx context.Context, fseq uint64) (uint64, error) {
	tv := strconv.FormatUint(w.term, 10)
	record := func() *nats.Msg {
		return &nats.Msg{Subject: w.n.fence, Data: []byte(tv), Header: nats.Header{termHeader: []string{tv}}}
	}
	if !w.seqChains() {
		ack, err := w.o.js.PublishMsg(ctx, record(), jetstream.WithExpectLastSequencePerSubject(fseq))
		if err != nil {
			return 0, err
		}
		return ack.Sequence, nil
	}
	if err := w.ensureBatches(ctx); err != nil { // a stream made before atomic batches
		return 0, err
	}
	id := []string{nuid.Next()}
	n := fencePadding + 1
	for i := 1; i < n; i++ {
		m := record()
		m.Header[batchIDHeader] = id
		m.Header[batchSeqHeader] = batchSeqValue(i)
		if i == 1 {
			m.Header[jetstream.ExpectedLastSubjSeqHeader] = []string{strconv.FormatUint(fseq, 10)}
		}
		if err := w.o.nc.PublishMsg(m); err != nil {
			return 0, err
		}
	}
	commit := record()
	commit.Header[batchIDHeader] = id
	commit.Header[batchSeqHeader] = batchSeqValue(n)
	commit.Header[batchCommitHeader] = []string{"1"}
	reply, err := w.o.nc.RequestMsgWithContext(ctx, commit)
	if err != nil {
		return 0, err
	}
	return parsePubAck(reply)
}

// dropOldFences removes the fence records below the newest one (a padded
// fence leaves fencePadding+1 behind; only the last is ever read). It is
// housekeeping: a failure is logged and retried at the next fence.
func (w *walImpl) dropOldFences(ctx context.Context) {
	if err := w.st.Purge(ctx, jetstream.WithPurgeSubject(w.n.fence), jetstream.WithPurgeKeep(1)); err != nil {
		w.log.Warn("could not remove superseded fence records; they take stream space until the next fence", "error", err)
	}
}
