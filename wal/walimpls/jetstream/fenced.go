package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

// A fenced writer's appends (term > 0).
//
// Each append is a link of a chain (setChain): it carries a Nats-Msg-Id (the
// caller's DedupeID, or a generated one) and is conditional on its
// predecessor's id being the stream's last (Nats-Expected-Last-Msg-Id), or,
// as the first link after Open or a resync, on the stream's last sequence.
// So once one append is not stored, every later one in flight is rejected
// too: the stored appends are always a prefix of the calls.
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
// duplicate with its original sequence instead of being stored twice.

// errChainBroken fails a fenced append handed in while the outcomes of
// appends sent before a failure are still on their way.
var errChainBroken = errors.New("an earlier append of this fenced writer failed and outcomes are still in flight; not sent (re-send once every outcome is in)")

// errConflict wraps the rejection of a chained append because something else
// was stored first (another writer's append, a newer term's fence). It is
// retryable: the re-send resynchronises and finds out which.
var errConflict = errors.New("rejected because the stream moved (another writer appended or a newer term fenced the channel)")

// appendFenced chains p onto the writer's appends and publishes it. Sends
// are serialised on sendMu, so chain order is call order.
func (w *walImpl) appendFenced(ctx context.Context, p *pending, dedupeID string) {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	resync, err := w.beginFenced()
	if err != nil {
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
	setChain(p.m, msgID, w.chain, w.expected)
	if err := w.publishFast(ctx, p); err != nil {
		w.finish(p, 0, err)
		return
	}
	w.chain = msgID
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

// settledFenced records a fenced append's outcome; a failure breaks the chain.
func (w *walImpl) settledFenced(err error) {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	if w.sent > 0 {
		w.sent--
	}
	if err != nil {
		w.broken = true
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
