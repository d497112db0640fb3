package jetstream

import (
	"errors"
	"fmt"
	"strings"
)

// Channel names (e.g. "words/0003", "recovery/shard-1.a") may contain '/' and
// '.', which stream names and subject tokens cannot. EscapeChannel maps a
// channel name to a token of [A-Za-z0-9_-] that is legal both as (part of) a
// stream name and as one subject token:
//
//	letters, digits, '-'  kept
//	'_'                   "__"
//	'/'                   "_s"
//	'.'                   "_d"
//	any other byte        "_xHH" (two lowercase hex digits)
//
// Every '_' in the output starts an escape, so the mapping is reversible
// (UnescapeChannel) and therefore injective: distinct channels never share a
// stream or subjects.

const hexDigits = "0123456789abcdef"

// EscapeChannel returns the stream-name-safe token for channel. It fails on an
// empty name.
func EscapeChannel(channel string) (string, error) {
	if channel == "" {
		return "", errors.New("jetstream: empty channel name")
	}
	var b strings.Builder
	b.Grow(len(channel) + 8)
	for i := 0; i < len(channel); i++ {
		c := channel[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
			b.WriteByte(c)
		case c == '_':
			b.WriteString("__")
		case c == '/':
			b.WriteString("_s")
		case c == '.':
			b.WriteString("_d")
		default:
			b.WriteString("_x")
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		}
	}
	return b.String(), nil
}

// UnescapeChannel inverts EscapeChannel. It fails, naming the position, on a
// token EscapeChannel cannot produce.
func UnescapeChannel(token string) (string, error) {
	if token == "" {
		return "", errors.New("jetstream: empty channel token")
	}
	var b strings.Builder
	b.Grow(len(token))
	for i := 0; i < len(token); i++ {
		c := token[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
			b.WriteByte(c)
		case c == '_':
			if i+1 >= len(token) {
				return "", fmt.Errorf("jetstream: channel token %q: dangling '_' at %d", token, i)
			}
			i++
			switch token[i] {
			case '_':
				b.WriteByte('_')
			case 's':
				b.WriteByte('/')
			case 'd':
				b.WriteByte('.')
			case 'x':
				if i+2 >= len(token) {
					return "", fmt.Errorf("jetstream: channel token %q: short hex escape at %d", token, i-1)
				}
				hi, lo := unhex(token[i+1]), unhex(token[i+2])
				if hi < 0 || lo < 0 {
					return "", fmt.Errorf("jetstream: channel token %q: bad hex escape at %d", token, i-1)
				}
				v := byte(hi<<4 | lo)
				if isPlain(v) {
					return "", fmt.Errorf("jetstream: channel token %q: non-canonical escape of %q at %d", token, v, i-1)
				}
				b.WriteByte(v)
				i += 2
			default:
				return "", fmt.Errorf("jetstream: channel token %q: unknown escape %q at %d", token, token[i-1:i+1], i-1)
			}
		default:
			return "", fmt.Errorf("jetstream: channel token %q: illegal byte %q at %d", token, c, i)
		}
	}
	return b.String(), nil
}

// isPlain reports whether EscapeChannel writes c as itself or with a short
// escape (so "_xHH" of it is not canonical).
func isPlain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '_' || c == '/' || c == '.'
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}

// validPrefix reports whether p can prefix stream names and be a subject token.
func validPrefix(p string) error {
	if p == "" {
		return errors.New("jetstream: empty stream prefix")
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("jetstream: stream prefix %q: illegal byte %q at %d (want [A-Za-z0-9_-])", p, c, i)
		}
	}
	return nil
}

// names are the JetStream names of one channel.
type names struct {
	channel string
	stream  string // <prefix>_<escaped>
	data    string // <prefix>.<escaped>.data
	fence   string // <prefix>.<escaped>.fence
}

// channelNames derives a channel's stream and subjects. The prefix must have
// passed validPrefix. The stream name is prefix + "_" + token; since the
// prefix is fixed per builder and the token is injective, so is the stream
// name.
func channelNames(prefix, channel string) (names, error) {
	tok, err := EscapeChannel(channel)
	if err != nil {
		return names{}, err
	}
	return names{
		channel: channel,
		stream:  prefix + "_" + tok,
		data:    prefix + "." + tok + ".data",
		fence:   prefix + "." + tok + ".fence",
	}, nil
}
