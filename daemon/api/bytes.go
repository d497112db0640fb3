package api

import (
	"encoding/base64"
	"fmt"
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

// EncodeBytes is b's JSON form: plain when valid UTF-8, else base64.
func EncodeBytes(b string) (plain, b64 *string) {
	if utf8.ValidString(b) {
		return &b, nil
	}
	e := base64.StdEncoding.EncodeToString([]byte(b))
	return nil, &e
}

// DecodeBytes is the inverse of EncodeBytes; field names the pair in errors.
func DecodeBytes(field string, plain, b64 *string) (string, error) {
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

// DescribeKey renders a key for messages: quoted with Go escapes, so a
// key that is not UTF-8 shows its bytes (`"a\xffb"`), and the empty key
// says what it is.
func DescribeKey(k string) string {
	if k == "" {
		return `"" (the empty key)`
	}
	return fmt.Sprintf("%q", k)
}
