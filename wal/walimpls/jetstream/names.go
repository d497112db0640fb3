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

// A namespace is the part of every stream name and subject a cluster uses
// that sets it apart from other clusters on the same NATS: its streams are
// "<namespace>_<token>", its subjects "<namespace>.<token>.data|fence", and
// its snapshot bucket (recoverylog/snapshot) "<namespace>-snapshots".
//
// A namespace is 1 to MaxNamespaceLen bytes of [A-Za-z0-9-]. It holds no '_',
// so the first '_' of a stream name ends the namespace: one stream name, one
// (namespace, channel). It is not "OBJ" or "KV" in any case: JetStream names
// the streams of object stores and key-value buckets "OBJ_<bucket>" and
// "KV_<bucket>", which such a namespace's streams could take (and a store
// directory on a case-insensitive file system would fold the case).

// DefaultNamespace is the namespace of the default etcd prefix "/consumerd",
// and of a Config without one.
const DefaultNamespace = "consumerd"

// MaxNamespaceLen bounds a namespace, leaving most of JetStream's 255 bytes
// of stream name to the channel.
const MaxNamespaceLen = 64

// NamespaceOf derives a cluster's namespace from its etcd prefix: the prefix
// without its leading '/', with '-' as the escape character
//
//	letters, digits   kept
//	'-'               "--"
//	'/'               "-s"
//	'.'               "-d"
//	'_'               "-u"
//	any other byte    "-xHH" (two lowercase hex digits)
//
// so "/consumerd" gives "consumerd" (the names consumerd always used),
// "/team-a/prod" gives "team--a-sprod". Every '-' of the result starts an
// escape, so distinct prefixes give distinct namespaces. It fails on a
// prefix that does not start with '/' or is nothing else, and on one whose
// namespace ValidNamespace rejects (reserved, too long), naming both.
func NamespaceOf(etcdPrefix string) (string, error) {
	rest, ok := strings.CutPrefix(etcdPrefix, "/")
	if !ok {
		return "", fmt.Errorf("etcd prefix %q does not start with '/'", etcdPrefix)
	}
	if rest == "" {
		return "", fmt.Errorf("etcd prefix %q gives an empty namespace", etcdPrefix)
	}
	var b strings.Builder
	b.Grow(len(rest) + 8)
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			b.WriteByte(c)
		case c == '-':
			b.WriteString("--")
		case c == '/':
			b.WriteString("-s")
		case c == '.':
			b.WriteString("-d")
		case c == '_':
			b.WriteString("-u")
		default:
			b.WriteString("-x")
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		}
	}
	ns := b.String()
	if err := ValidNamespace(ns); err != nil {
		return "", fmt.Errorf("etcd prefix %q gives %w", etcdPrefix, err)
	}
	return ns, nil
}

// ValidNamespace checks a namespace (see NamespaceOf); the error names it
// and says what is wrong.
func ValidNamespace(ns string) error {
	if ns == "" {
		return errors.New("namespace \"\": must not be empty")
	}
	if len(ns) > MaxNamespaceLen {
		return fmt.Errorf("namespace %q: %d bytes, at most %d", ns, len(ns), MaxNamespaceLen)
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("namespace %q: illegal byte %q at %d (want [A-Za-z0-9-]; '_' separates namespace and channel in stream names)", ns, c, i)
		}
	}
	for _, r := range []string{"OBJ", "KV"} {
		if strings.EqualFold(ns, r) {
			return fmt.Errorf("namespace %q: reserved (JetStream's own streams are named %s_<bucket>)", ns, r)
		}
	}
	return nil
}

// names are the JetStream names of one channel.
type names struct {
	channel string
	stream  string // <namespace>_<escaped>
	data    string // <namespace>.<escaped>.data
	fence   string // <namespace>.<escaped>.fence
	marks   string // <namespace>.<escaped>.mark: batch markers on marks.<escaped chain>
}

// channelNames derives a channel's stream and subjects. The namespace must
// have passed ValidNamespace. The stream name is namespace + "_" + token: the
// namespace has no '_', so its end is the first '_', and the token is
// injective, so distinct (namespace, channel) pairs never share a stream.
// StreamName is the name of channel's stream in namespace ns
// ("<ns>_<token>"), as an operator finds it with the NATS CLI.
func StreamName(ns, channel string) (string, error) {
	tok, err := EscapeChannel(channel)
	if err != nil {
		return "", err
	}
	return streamOf(ns, tok), nil
}

// streamOf is the stream of the channel whose escaped token is tok.
func streamOf(ns, tok string) string { return ns + "_" + tok }

func channelNames(ns, channel string) (names, error) {
	tok, err := EscapeChannel(channel)
	if err != nil {
		return names{}, err
	}
	return names{
		channel: channel,
		stream:  streamOf(ns, tok),
		data:    ns + "." + tok + ".data",
		fence:   ns + "." + tok + ".fence",
		marks:   ns + "." + tok + ".mark",
	}, nil
}
