package query

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/daemon/api"
)

// binaryKeys are keys that encoding/json would mangle (or that look alike):
// bytes that are not UTF-8, U+FFFD itself, NUL, the empty key.
var binaryKeys = []string{"", "plain", "a b\tc\nd", "\xff", "\xfe", "a\xffb", "a\xfeb", "a\uFFFDb", "\x00\x01", "\xc3\x28", "<&>"}

func TestQueryEntriesRoundTrip(t *testing.T) {
	vals := map[string]string{}
	for i, k := range binaryKeys {
		vals[k] = binaryKeys[len(binaryKeys)-1-i] // values are bytes too
	}
	raw, err := json.Marshal(api.QueryResponse{App: "a", Shards: map[string][]api.QueryEntry{"s": api.EncodeEntries(vals)}})
	if err != nil {
		t.Fatal(err)
	}
	var qr api.QueryResponse
	if err := json.Unmarshal(raw, &qr); err != nil {
		t.Fatal(err)
	}
	got, err := api.DecodeEntries(qr.Shards["s"])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(vals) {
		t.Fatalf("%d keys came back, want %d: %q", len(got), len(vals), got)
	}
	for k, v := range vals {
		if got[k] != v {
			t.Errorf("key %q: value %q, want %q", k, got[k], v)
		}
	}
	// UTF-8 travels as text, anything else as base64: exactly one field.
	if !strings.Contains(string(raw), `{"key":"plain","value_b64":"wyg="}`) || !strings.Contains(string(raw), `{"key_b64":"/w==","value":"a`+"\uFFFD"+`b"}`) {
		t.Errorf("entries are not as documented: %s", raw)
	}
	for _, bad := range []string{`[{"value":"v"}]`, `[{"key":"k","key_b64":"aw==","value":"v"}]`, `[{"key_b64":"!!","value":"v"}]`, `[{"key":"k"}]`, `[{"key":"k","value":"1"},{"key":"k","value":"2"}]`} {
		var es []api.QueryEntry
		if err := json.Unmarshal([]byte(bad), &es); err != nil {
			t.Fatal(err)
		}
		if _, err := api.DecodeEntries(es); err == nil {
			t.Errorf("entries %s accepted", bad)
		}
	}
}

func TestDecodeBase64Param(t *testing.T) {
	// "\xfb\xff\xbf" is "+/+/" in the standard alphabet, "-_-_" URL-safe.
	for in, want := range map[string]string{
		"-_-_": "\xfb\xff\xbf", "+/+/": "\xfb\xff\xbf", "_w": "\xff", "_w==": "\xff", "/w==": "\xff", "/w": "\xff", "": "", "YQ": "a",
	} {
		got, err := decodeBase64Param(in)
		if err != nil || got != want {
			t.Errorf("decodeBase64Param(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"-_+/", "a", "!!", "YQ=a"} {
		if _, err := decodeBase64Param(in); err == nil {
			t.Errorf("decodeBase64Param(%q) accepted", in)
		}
	}
	if _, err := decodeBase64Param(" /+/"); err == nil || !strings.Contains(err.Error(), "%2B") {
		t.Errorf("a '+' sent bare (a space): %v, want the %%2B hint", err)
	}
}

func TestDescribeKey(t *testing.T) {
	for k, want := range map[string]string{"": `"" (the empty key)`, "cat": `"cat"`, "a\xffb": `"a\xffb"`} {
		if got := api.DescribeKey(k); got != want {
			t.Errorf("describeKey(%q) = %s, want %s", k, got, want)
		}
	}
}
