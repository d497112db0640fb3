package query

import (
	"bufio"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"unicode/utf8"
)

// decodeBase64Param decodes a base64 request parameter. It takes the
// URL-safe alphabet (RFC 4648 §5, '-' and '_': needs no escaping in a URL)
// and the standard one ('+' and '/'; a '+' must be sent as %2B, as a bare
// '+' in a query string means a space), with or without '=' padding.
func decodeBase64Param(s string) (string, error) {
	t := strings.TrimRight(s, "=")
	enc := base64.RawURLEncoding
	if strings.ContainsAny(t, "+/") {
		enc = base64.RawStdEncoding
	}
	b, err := enc.DecodeString(t)
	if err != nil {
		if strings.Contains(s, " ") {
			err = fmt.Errorf("%w (a space: a '+' in a query string must be sent as %%2B; or use the URL-safe alphabet, '-' and '_')", err)
		}
		return "", err
	}
	return string(b), nil
}

// PlainKey reports whether a key prints unambiguously as itself in a
// "key value" line: valid UTF-8, not empty, no space, tab, newline or other
// control character, and no U+FFFD (which looks like a replaced byte).
func PlainKey(k string) bool {
	if k == "" || !utf8.ValidString(k) {
		return false
	}
	for _, r := range k {
		if r <= ' ' || r == 0x7f || r == utf8.RuneError || (r >= 0x80 && r < 0xa0) || r == '\u2028' || r == '\u2029' {
			return false
		}
	}
	return true
}

var errBothKeys = errors.New("give one of key=K or key_b64=B, not both")

// KeyParam is a query's key: key=K (any bytes, percent-encoded) or
// key_b64=B. hasKey is false when neither is given.
func KeyParam(q url.Values) (key string, hasKey bool, err error) {
	switch {
	case q.Has("key") && q.Has("key_b64"):
		return "", false, errBothKeys
	case q.Has("key_b64"):
		k, err := decodeBase64Param(q.Get("key_b64"))
		if err != nil {
			return "", false, fmt.Errorf("key_b64=%s: not base64: %w", q.Get("key_b64"), err)
		}
		return k, true, nil
	case q.Has("key"):
		return q.Get("key"), true, nil
	}
	return "", false, nil
}

// WriteKeyValues prints "key value" lines sorted by key bytes, each key as
// its raw bytes or, with hexKeys, as hex. It returns how many keys print
// ambiguously as raw bytes (see PlainKey); none do as hex.
func WriteKeyValues(w io.Writer, vals map[string]string, hexKeys bool) (ambiguous int, err error) {
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	bw := bufio.NewWriter(w)
	for _, k := range keys {
		if hexKeys {
			_, _ = bw.WriteString(hex.EncodeToString([]byte(k)))
		} else {
			if !PlainKey(k) {
				ambiguous++
			}
			_, _ = bw.WriteString(k)
		}
		_ = bw.WriteByte(' ')
		_, _ = bw.WriteString(vals[k])
		_ = bw.WriteByte('\n')
	}
	return ambiguous, bw.Flush()
}
