package jetstream

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/wal/message"
)

// Message layout on the data subject: the NATS payload is the message payload,
// unchanged (so tools reading the stream see it), except for a key too large
// for a header. A message with a key or properties carries one header,
// metaHeader, holding them URL-query-encoded — safe for any bytes in keys,
// names and values (NATS headers cannot carry CR/LF or ':' in names):
//
//	kp=1          the key equals the payload (a line published as its own
//	              key): stored once, in the payload
//	k=<key>       the key, when at most maxHeaderKey bytes
//	kl=<n>        a larger key: it is the first n bytes of the NATS payload,
//	              the message payload follows (JetStream refuses headers over
//	              64 KiB)
//	p:<name>=<v>  a property
//
// So a message fits when its key (unless it equals the payload), payload and
// properties fit in the server's max_payload (1 MiB by default).
const (
	metaHeader    = "Consumerd-Meta"
	metaKey       = "k"
	metaKeyLen    = "kl"
	metaKeyIsData = "kp"
	metaPropPfx   = "p:"
	// maxHeaderKey is the largest key kept in the header.
	maxHeaderKey = 4096
	// termHeader carries the term of a fence record (also its payload).
	termHeader = "Consumerd-Term"
)

// encodeMessage builds the NATS message for msg on subject.
func encodeMessage(subject string, msg *message.MutableMessage) *nats.Msg {
	m := &nats.Msg{Subject: subject, Data: msg.Payload}
	if msg.Key != "" || len(msg.Properties) > 0 {
		v := make(url.Values, len(msg.Properties)+1)
		switch {
		case msg.Key == "":
		case msg.Key == string(msg.Payload):
			v[metaKeyIsData] = []string{"1"}
		case len(msg.Key) <= maxHeaderKey:
			v[metaKey] = []string{msg.Key}
		default:
			v[metaKeyLen] = []string{strconv.Itoa(len(msg.Key))}
			data := make([]byte, 0, len(msg.Key)+len(msg.Payload))
			m.Data = append(append(data, msg.Key...), msg.Payload...)
		}
		for k, val := range msg.Properties {
			v[metaPropPfx+k] = []string{val}
		}
		m.Header = nats.Header{metaHeader: []string{v.Encode()}}
	}
	if msg.DedupeID != "" {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header[jetstream.MsgIDHeader] = []string{msg.DedupeID}
	}
	return m
}

// setChain makes m a link of a fenced writer's chain: it carries msgID as its
// Nats-Msg-Id and is conditional on the previous link (Nats-Expected-Last-Msg-Id
// prev), or, as the first link after a sync (prev == ""), on the stream's last
// sequence (Nats-Expected-Last-Sequence lastSeq). Either way the server stores
// it only if nothing else was stored since its predecessor.
func setChain(m *nats.Msg, msgID, prev string, lastSeq uint64) {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header[jetstream.MsgIDHeader] = []string{msgID}
	delete(m.Header, jetstream.ExpectedLastSeqHeader)
	delete(m.Header, jetstream.ExpectedLastMsgIDHeader)
	if prev == "" {
		m.Header[jetstream.ExpectedLastSeqHeader] = []string{strconv.FormatUint(lastSeq, 10)}
	} else {
		m.Header[jetstream.ExpectedLastMsgIDHeader] = []string{prev}
	}
}

// wireSize is the number of bytes m occupies against the server's
// max_payload: payload plus the encoded header block.
func wireSize(m *nats.Msg) (total, headers int) {
	if len(m.Header) > 0 {
		headers = len("NATS/1.0\r\n") + 2
		for k, vs := range m.Header {
			for _, v := range vs {
				headers += len(k) + 2 + len(v) + 2
			}
		}
	}
	return len(m.Data) + headers, headers
}

// decodeMessage turns a data-subject message into an ImmutableMessage.
func decodeMessage(channel string, seq uint64, ts time.Time, hdr nats.Header, data []byte) (message.ImmutableMessage, error) {
	im := message.ImmutableMessage{Channel: channel, ID: message.MessageID(seq), Payload: data, AppendTime: ts}
	meta := hdr.Get(metaHeader)
	if meta == "" {
		return im, nil
	}
	v, err := url.ParseQuery(meta)
	if err != nil {
		return im, fmt.Errorf("jetstream: channel %q message %d: bad %s header: %w", channel, seq, metaHeader, err)
	}
	for k, vals := range v {
		if len(vals) == 0 {
			continue
		}
		switch {
		case k == metaKey:
			im.Key = vals[0]
		case k == metaKeyIsData:
			im.Key = string(data)
		case k == metaKeyLen:
			n, err := strconv.Atoi(vals[0])
			if err != nil || n < 0 || n > len(data) {
				return im, fmt.Errorf("jetstream: channel %q message %d: %s header: key length %q does not fit a payload of %d bytes", channel, seq, metaHeader, vals[0], len(data))
			}
			im.Key, im.Payload = string(data[:n]), data[n:]
		case strings.HasPrefix(k, metaPropPfx):
			if im.Properties == nil {
				im.Properties = make(map[string]string, len(v))
			}
			im.Properties[k[len(metaPropPfx):]] = vals[0]
		}
	}
	return im, nil
}

// parseTerm reads the term of a fence record.
func parseTerm(channel string, seq uint64, hdr nats.Header, data []byte) (uint64, error) {
	s := hdr.Get(termHeader)
	if s == "" {
		s = string(data)
	}
	term, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("jetstream: channel %q: corrupt fence record at sequence %d: %w", channel, seq, err)
	}
	return term, nil
}
