package jetstream

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
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

// encodeHeaders is room for the headers a message may carry: meta, dedupe
// id and a batch's or a chain's two. Sized up front, the map never grows
// (growing it was a measurable share of publishing).
const encodeHeaders = 4

// encodeMessage builds the NATS message for msg on subject.
func encodeMessage(subject string, msg *message.MutableMessage) *nats.Msg {
	m := &nats.Msg{}
	encodeInto(m, subject, msg)
	return m
}

// encodeInto makes m the NATS message for msg on subject, reusing m's header
// map (emptied) if it has one: a batch publishes its messages through one
// nats.Msg, as nats.go's PublishMsg copies a message into the connection's
// buffer before it returns.
func encodeInto(m *nats.Msg, subject string, msg *message.MutableMessage) {
	hdr := m.Header
	clear(hdr)
	*m = nats.Msg{Subject: subject, Data: msg.Payload, Header: hdr}
	if m.Header == nil && (msg.Key != "" || len(msg.Properties) > 0 || msg.DedupeID != "") {
		m.Header = make(nats.Header, encodeHeaders)
	}
	if msg.Key != "" || len(msg.Properties) > 0 {
		var meta strings.Builder
		switch {
		case msg.Key == "":
		case msg.Key == string(msg.Payload):
			metaPair(&meta, metaKeyIsData, "1")
		case len(msg.Key) <= maxHeaderKey:
			metaPair(&meta, metaKey, msg.Key)
		default:
			metaPair(&meta, metaKeyLen, strconv.Itoa(len(msg.Key)))
			data := make([]byte, 0, len(msg.Key)+len(msg.Payload))
			m.Data = append(append(data, msg.Key...), msg.Payload...)
		}
		// In name order, so a message always encodes alike.
		if len(msg.Properties) > 0 {
			for _, k := range slices.Sorted(maps.Keys(msg.Properties)) {
				metaPair(&meta, metaPropPfx+k, msg.Properties[k])
			}
		}
		m.Header[metaHeader] = []string{meta.String()}
	}
	if msg.DedupeID != "" {
		m.Header[jetstream.MsgIDHeader] = []string{msg.DedupeID}
	}
}

// setChain makes m a link of a fenced writer's chain (fenced.go): it carries
// msgID as its Nats-Msg-Id and is conditional on the stream's last sequence
// being lastSeq (Nats-Expected-Last-Sequence), or, on an id chain past its
// first link, on the previous link's id being the last stored
// (Nats-Expected-Last-Msg-Id prev; prev == "" for a sequence condition).
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
	seen := 0 // of the key's forms, the first wins (as url.ParseQuery's first value)
	for pair := range strings.SplitSeq(meta, "&") {
		if pair == "" {
			continue
		}
		rawName, rawValue, _ := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(rawName)
		var val string
		if err == nil {
			val, err = url.QueryUnescape(rawValue)
		}
		if err == nil && strings.Contains(pair, ";") { // as url.ParseQuery
			err = errors.New("an unescaped semicolon")
		}
		if err != nil {
			return im, fmt.Errorf("jetstream: channel %q message %d: bad %s header %q: %w", channel, seq, metaHeader, pair, err)
		}
		switch {
		case name == metaKey || name == metaKeyIsData || name == metaKeyLen:
			if seen++; seen > 1 {
				continue
			}
			switch name {
			case metaKey:
				im.Key = val
			case metaKeyIsData:
				im.Key = string(data)
			default:
				n, err := strconv.Atoi(val)
				if err != nil || n < 0 || n > len(data) {
					return im, fmt.Errorf("jetstream: channel %q message %d: %s header: key length %q does not fit a payload of %d bytes", channel, seq, metaHeader, val, len(data))
				}
				im.Key, im.Payload = string(data[:n]), data[n:]
			}
		case strings.HasPrefix(name, metaPropPfx):
			if im.Properties == nil {
				im.Properties = make(map[string]string, strings.Count(meta, "&")+1)
			}
			if _, dup := im.Properties[name[len(metaPropPfx):]]; !dup {
				im.Properties[name[len(metaPropPfx):]] = val
			}
		}
	}
	return im, nil
}

// metaPair appends name=value to a metaHeader value, query-escaped.
func metaPair(b *strings.Builder, name, value string) {
	if b.Len() > 0 {
		b.WriteByte('&')
	}
	b.WriteString(url.QueryEscape(name))
	b.WriteByte('=')
	b.WriteString(url.QueryEscape(value))
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
