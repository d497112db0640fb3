package jetstream

import (
	"strings"
	"testing"
)

func TestEscapeChannelTable(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"words/0003", "words_s0003"},
		{"recovery/shard-1", "recovery_sshard-1"},
		{"a.b", "a_db"},
		{"a_b", "a__b"},
		{"_/", "___s"},
		{"a b*>", "a_x20b_x2a_x3e"},
		{"ü", "_xc3_xbc"},
	} {
		got, err := EscapeChannel(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("EscapeChannel(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			continue
		}
		back, err := UnescapeChannel(got)
		if err != nil || back != tc.in {
			t.Errorf("UnescapeChannel(%q) = %q, %v; want %q", got, back, err, tc.in)
		}
	}
	if _, err := EscapeChannel(""); err == nil {
		t.Error("EscapeChannel(\"\") succeeded")
	}
}

func TestUnescapeRejectsNonCanonical(t *testing.T) {
	for _, bad := range []string{"", "a_", "a_q", "_x4", "_xzz", "_x61", "_x2f", "a.b", "a b", "_X20"} {
		if got, err := UnescapeChannel(bad); err == nil {
			t.Errorf("UnescapeChannel(%q) = %q, want error", bad, got)
		}
	}
}

// Channels that differ only in the characters the mapping rewrites must never
// share a stream.
func TestDistinctChannelsNeverCollide(t *testing.T) {
	chans := []string{
		"a/b", "a.b", "a_b", "a_sb", "a_db", "a__b", "a-b", "a/_b", "a_/b", "a//b",
		"a__sb", "a_s_b", "ab", "a/b/", "a/b.", "a/b_", "recovery/x", "recovery_sx",
		"recovery.x", "words/0001", "words/001", "words_0001", "A/b",
	}
	seen := map[string]string{}
	for _, c := range chans {
		n, err := channelNames("consumerd", c)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{n.stream, n.data, n.fence} {
			if prev, dup := seen[key]; dup {
				t.Fatalf("channels %q and %q both map to %q", prev, c, key)
			}
			seen[key] = c
		}
		if strings.ContainsAny(n.stream, ". */>\\\t") {
			t.Fatalf("stream name %q for %q contains an illegal character", n.stream, c)
		}
	}
}

func FuzzEscapeRoundTrip(f *testing.F) {
	for _, s := range []string{"words/0003", "recovery/s-1", "a.b_c", "_x41", "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := EscapeChannel(s)
		if s == "" {
			if err == nil {
				t.Fatal("empty channel accepted")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(tok); i++ {
			c := tok[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				t.Fatalf("token %q has illegal byte %q", tok, c)
			}
		}
		back, err := UnescapeChannel(tok)
		if err != nil || back != s {
			t.Fatalf("round trip %q -> %q -> %q, %v", s, tok, back, err)
		}
	})
}

func FuzzUnescapeCanonical(f *testing.F) {
	for _, s := range []string{"words_s0003", "a__b", "_x20", "_x61"} {
		f.Add(s)
	}
	// Any token that unescapes must be exactly what EscapeChannel produces for
	// the result: one channel, one token.
	f.Fuzz(func(t *testing.T, tok string) {
		ch, err := UnescapeChannel(tok)
		if err != nil {
			return
		}
		again, err := EscapeChannel(ch)
		if err != nil || again != tok {
			t.Fatalf("token %q unescapes to %q which escapes to %q (%v)", tok, ch, again, err)
		}
	})
}

func TestValidPrefix(t *testing.T) {
	for _, ok := range []string{"consumerd", "t_1-x"} {
		if err := validPrefix(ok); err != nil {
			t.Errorf("validPrefix(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a b", "a/b", "a*", "a>"} {
		if err := validPrefix(bad); err == nil {
			t.Errorf("validPrefix(%q) accepted", bad)
		}
	}
}
