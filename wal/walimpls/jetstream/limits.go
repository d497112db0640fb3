package jetstream

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// Message limits (walimpls.MessageChecker). A message is refused by the
// server when it is larger (payload plus header block) than the server's
// max_payload — the connection's, refreshed on reconnect — or than its
// stream's max_msg_size, read when the WAL was opened. Both are checked
// locally: before every append (checkSize) and, for a writer that stages
// messages to publish later, by CheckMessage.

var _ walimpls.MessageChecker = (*walImpl)(nil)

// batchHeaderRoom is room for the headers a batch adds to a message
// (Nats-Batch-Id and Nats-Batch-Sequence, or a Nats-Msg-Id derived from the
// chain) and the header block's framing: CheckMessage counts it, so a
// message it passes fits in any batch.
const batchHeaderRoom = 256

// sizeLimit is the smaller of the server's max_payload and the stream's
// max_msg_size (0: neither is known) and the name of the one that binds.
func (w *walImpl) sizeLimit() (int64, string) {
	max, what := w.o.maxPayload.Load(), "the NATS server's max_payload"
	if s := int64(w.maxMsgSize.Load()); s > 0 && (max <= 0 || s < max) {
		max, what = s, fmt.Sprintf("stream %s's max_msg_size", w.n.stream)
	}
	return max, what
}

// checkSize fails a message the server would refuse for its size.
func (w *walImpl) checkSize(m *nats.Msg) error {
	max, what := w.sizeLimit()
	if max <= 0 {
		return nil
	}
	// The common case without walking the header map once more (a cost paid
	// per append): headers JetStream accepts cannot push a payload this
	// small over the limit; larger ones it refuses itself.
	if int64(len(m.Data))+jsMaxHeaders <= max {
		return nil
	}
	if total, hdr := wireSize(m); int64(total) > max {
		return walimpls.Permanent(fmt.Errorf(
			"jetstream: append to channel %q: message of %d bytes (payload %d + headers %d) exceeds %s of %d bytes: %w",
			w.n.channel, total, len(m.Data), hdr, what, max, walimpls.ErrMessageLimit))
	}
	return nil
}

// CheckMessage fails msg when it, with room for a batch's headers, exceeds
// the server's max_payload or the stream's max_msg_size (see
// walimpls.MessageChecker). A message far below the limit is passed
// without encoding it.
func (w *walImpl) CheckMessage(msg *message.MutableMessage) error {
	max, what := w.sizeLimit()
	if max <= 0 {
		return nil
	}
	// An upper bound of the encoded size: URL-encoding at most triples a
	// key's or a property's bytes.
	bound := len(msg.Payload) + 3*len(msg.Key) + batchHeaderRoom + 64
	for k, v := range msg.Properties {
		bound += 3*(len(k)+len(v)) + 4
	}
	if int64(bound) <= max {
		return nil
	}
	total, hdr := wireSize(encodeMessage(w.n.data, msg))
	if int64(total+batchHeaderRoom) <= max {
		return nil
	}
	return walimpls.Permanent(fmt.Errorf(
		"channel %q: a message of %d bytes (payload %d, key %d, headers %d, with %d bytes of room for a batch's headers) exceeds %s of %d bytes: %w",
		w.n.channel, total+batchHeaderRoom, len(msg.Payload), len(msg.Key), hdr, batchHeaderRoom, what, max, walimpls.ErrMessageLimit))
}

// recheckLimit re-reads the stream's max_msg_size (an operator may have
// lowered it since the WAL was opened) after the server's reply refused b,
// and fails b permanently, with that reply, when a message of it, with the headers an atomic batch adds, exceeds it; nil
// otherwise (also when the stream cannot be read: the caller's error
// stands).
func (w *walImpl) recheckLimit(ctx context.Context, b walimpls.Batch, reply error) error {
	info, err := w.st.Info(ctx)
	if err != nil {
		return nil
	}
	w.maxMsgSize.Store(info.Config.MaxMsgSize)
	m := &nats.Msg{Header: make(nats.Header, encodeHeaders)} // reused, as sendAtomic's
	for i := range b.Messages {
		encodeInto(m, w.n.data, &b.Messages[i])
		m.Header[batchIDHeader] = []string{"batch-id-of-22-chars.."}
		m.Header[batchSeqHeader] = batchSeqValue(i + 1)
		if err := w.checkSize(m); err != nil {
			return fmt.Errorf("jetstream: append batch to channel %q: message %d: %w (the server's reply: %v)", w.n.channel, i, err, reply)
		}
	}
	return nil
}
