package topic

import (
	"errors"
	"strings"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	d := Description{Name: "words", Partitions: 4}
	got, err := DecodeRecord("/consumerd", Key("/consumerd", "words"), d.Encode())
	if err != nil || got != d {
		t.Fatalf("DecodeRecord(Encode(%+v)) = %+v, %v", d, got, err)
	}
	if k := Key("/consumerd", "words"); k != "/consumerd/topics/words" {
		t.Fatalf("Key = %q", k)
	}
	// The name may be left out: the key gives it.
	got, err = DecodeRecord("/x", "/x/topics/t", []byte(`{"partitions":2}`))
	if err != nil || got != (Description{Name: "t", Partitions: 2}) {
		t.Fatalf("record without name: %+v, %v", got, err)
	}
}

func TestRecordErrors(t *testing.T) {
	for _, tc := range []struct{ key, raw, want string }{
		{"/c/topics/words", `junk`, "invalid character"},
		{"/c/topics/words", `{"partition":4}`, `unknown field "partition"`},
		{"/c/topics/words", `{"name":"other","partitions":4}`, "does not match the key"},
		{"/c/topics/words", `{"partitions":0}`, "out of range"},
		{"/c/topics/words", `{"partitions":10001}`, "out of range"},
		{"/c/topics/..", `{"partitions":1}`, "not allowed"},
		{"/c/topics/a/b", `{"partitions":1}`, "not a key"},
		{"/c/items/a", `{"partitions":1}`, "not a key"},
	} {
		_, err := DecodeRecord("/c", tc.key, []byte(tc.raw))
		if !errors.Is(err, ErrBadRecord) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("DecodeRecord(%s, %s) = %v, want an ErrBadRecord naming the key and saying %q", tc.key, tc.raw, err, tc.want)
		}
	}
}
