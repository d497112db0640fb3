package jetstream

import (
	"bytes"
	"fmt"
	"maps"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/consumerd/consumerd/wal/message"
)

func roundTrip(t testing.TB, msg message.MutableMessage) message.ImmutableMessage {
	t.Helper()
	m := encodeMessage("s.data", &msg)
	if total, hdr := wireSize(m); hdr > 64*1024 {
		t.Fatalf("key %d bytes: header of %d bytes (total %d) exceeds JetStream's 64 KiB", len(msg.Key), hdr, total)
	}
	im, err := decodeMessage("c/0000", 7, time.Unix(1, 0), m.Header, m.Data)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return im
}

func TestCodecRoundTrip(t *testing.T) {
	big := strings.Repeat("k", 200_000)
	for _, msg := range []message.MutableMessage{
		{Payload: []byte("p")},
		{Key: "k", Payload: []byte("p")},
		{Key: "line", Payload: []byte("line")},
		{Key: "\xff\x00\xfe not utf-8\r\n", Payload: []byte("x")},
		{Key: big, Payload: []byte("after a big key")},
		{Key: big, Payload: []byte(big)},
		{Key: strings.Repeat("\x80", maxHeaderKey+1), Payload: nil},
		{Key: "k", Payload: []byte("p"), Properties: map[string]string{"a": "b", "c:d": "\r\n"}},
	} {
		im := roundTrip(t, msg)
		if im.Key != msg.Key || !bytes.Equal(im.Payload, msg.Payload) || !maps.Equal(im.Properties, msg.Properties) {
			t.Errorf("key %.20q (%d bytes): decoded key %.20q (%d), payload %.20q, props %v; want payload %.20q props %v",
				msg.Key, len(msg.Key), im.Key, len(im.Key), im.Payload, im.Properties, msg.Payload, msg.Properties)
		}
	}
}

// A key equal to the payload is stored once: the line format's 1 MiB line
// fits in 1 MiB.
func TestCodecKeyIsPayloadStoredOnce(t *testing.T) {
	line := strings.Repeat("w", 1<<20-200)
	msg := message.MutableMessage{Key: line, Payload: []byte(line)}
	if total, _ := wireSize(encodeMessage("s.data", &msg)); total > 1<<20 {
		t.Fatalf("a %d-byte line published as its own key takes %d bytes on the wire", len(line), total)
	}
}

func TestCodecBadKeyLength(t *testing.T) {
	m := encodeMessage("s.data", &message.MutableMessage{Key: strings.Repeat("k", maxHeaderKey+1), Payload: []byte("p")})
	_, err := decodeMessage("c/0000", 7, time.Time{}, m.Header, m.Data[:10])
	if err == nil || !strings.Contains(err.Error(), "key length") {
		t.Fatalf("truncated payload: %v, want an error naming the key length", err)
	}
}

// Headers written by hand or by other tools: any order, repeated names
// (the first wins), escapes; a bad escape is an error naming the pair.
func TestCodecDecodeHeader(t *testing.T) {
	for _, c := range []struct{ meta, want string }{
		{"p%3Aa=1&k=key", `key="key" props=map[a:1]`},
		{"k=first&k=second&p:x=1&p:x=2", `key="first" props=map[x:1]`},
		{"&&kp=1&", `key="data" props=map[]`},
		{"k=a+b%26c", `key="a b&c" props=map[]`},
		{"k=%zz", `error: bad Consumerd-Meta header "k=%zz"`},
		{"k;x=1", `error: bad Consumerd-Meta header "k;x=1"`},
		{"kl=9", `error: key length "9" does not fit a payload of 4 bytes`},
	} {
		im, err := decodeMessage("c/0000", 1, time.Time{}, nats.Header{metaHeader: {c.meta}}, []byte("data"))
		got := fmt.Sprintf("key=%q props=%v", im.Key, im.Properties)
		if err != nil {
			got = "error: " + err.Error()
		}
		if !strings.Contains(got, strings.TrimPrefix(c.want, "error: ")) || (err != nil) != strings.HasPrefix(c.want, "error: ") {
			t.Errorf("%q: %s; want %s", c.meta, got, c.want)
		}
	}
}

func FuzzCodec(f *testing.F) {
	f.Add("k", []byte("p"), "v")
	f.Add("", []byte(""), "")
	f.Add("same", []byte("same"), "x")
	f.Fuzz(func(t *testing.T, key string, payload []byte, prop string) {
		msg := message.MutableMessage{Key: key, Payload: payload}
		if prop != "" {
			msg.Properties = map[string]string{"p": prop}
		}
		m := encodeMessage("s.data", &msg)
		im, err := decodeMessage("c/0000", 1, time.Time{}, m.Header, m.Data)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		// The header is a query string any reader parses alike (earlier
		// releases read it with url.ParseQuery).
		if meta := m.Header.Get(metaHeader); meta != "" {
			v, err := url.ParseQuery(meta)
			if err != nil || (prop != "" && v.Get(metaPropPfx+"p") != prop) {
				t.Fatalf("header %q: url.ParseQuery gives %v, %v", meta, v, err)
			}
		}
		if im.Key != key || !bytes.Equal(im.Payload, payload) || !maps.Equal(im.Properties, msg.Properties) {
			t.Fatalf("round trip: key %q payload %q props %v, want %q %q %v", im.Key, im.Payload, im.Properties, key, payload, msg.Properties)
		}
	})
}
