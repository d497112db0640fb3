package daemon

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Message keys, payloads and an app's keys and values are Go strings holding
// any bytes, UTF-8 or not. JSON strings cannot carry bytes that are not
// UTF-8 (encoding/json replaces them with U+FFFD), so every JSON output of
// consumerd carries such a field F one of two ways, exactly one present:
//
//	"F":     "<text>"    when the bytes are valid UTF-8 (the common case)
//	"F_b64": "<base64>"  otherwise: standard base64 with padding (RFC 4648
//	                     §4, what `base64 -d` and encoding/json's []byte read)
//
// A reader takes F when it is there and decodes F_b64 otherwise.

// jsonBytes is b's JSON form: plain when valid UTF-8, else base64.
func jsonBytes(b string) (plain, b64 *string) {
	if utf8.ValidString(b) {
		return &b, nil
	}
	e := base64.StdEncoding.EncodeToString([]byte(b))
	return nil, &e
}

// fromJSONBytes is the inverse of jsonBytes; field names the pair in errors.
func fromJSONBytes(field string, plain, b64 *string) (string, error) {
	switch {
	case plain != nil && b64 != nil:
		return "", fmt.Errorf("both %q and %q are set", field, field+"_b64")
	case plain != nil:
		return *plain, nil
	case b64 != nil:
		b, err := base64.StdEncoding.DecodeString(*b64)
		if err != nil {
			return "", fmt.Errorf("%q: %w", field+"_b64", err)
		}
		return string(b), nil
	default:
		return "", fmt.Errorf("neither %q nor %q is set", field, field+"_b64")
	}
}

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

// describeKey renders a key for messages: quoted with Go escapes, so a
// key that is not UTF-8 shows its bytes (`"a\xffb"`), and the empty key
// says what it is.
func describeKey(k string) string {
	if k == "" {
		return `"" (the empty key)`
	}
	return fmt.Sprintf("%q", k)
}

// plainKey reports whether a key prints unambiguously as itself in a
// "key value" line: valid UTF-8, not empty, no space, tab, newline or other
// control character, and no U+FFFD (which looks like a replaced byte).
func plainKey(k string) bool {
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
