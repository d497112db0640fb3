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

func TestNamespaceOf(t *testing.T) {
	for _, tc := range []struct{ prefix, want string }{
		{"/consumerd", "consumerd"}, // the names consumerd always used
		{"/alpha", "alpha"},
		{"/Alpha", "Alpha"},
		{"/a/b", "a-sb"},
		{"/a-b", "a--b"},
		{"/a_b", "a-ub"},
		{"/a.b", "a-db"},
		{"/a b", "a-x20b"},
		{"/a/", "a-s"},
		{"//a", "-sa"},
		{"/-", "--"},
		{"/ü", "-xc3-xbc"},
		{"/team-a/prod.eu_1", "team--a-sprod-deu-u1"},
		{"/" + strings.Repeat("x", MaxNamespaceLen), strings.Repeat("x", MaxNamespaceLen)},
	} {
		got, err := NamespaceOf(tc.prefix)
		if err != nil || got != tc.want {
			t.Errorf("NamespaceOf(%q) = %q, %v; want %q", tc.prefix, got, err, tc.want)
			continue
		}
		if err := ValidNamespace(got); err != nil {
			t.Errorf("NamespaceOf(%q) = %q, which ValidNamespace rejects: %v", tc.prefix, got, err)
		}
	}
}

func TestNamespaceOfRejects(t *testing.T) {
	for _, tc := range []struct{ prefix, want string }{
		{"", `etcd prefix "" does not start with '/'`},
		{"consumerd", `etcd prefix "consumerd" does not start with '/'`},
		{"/", `etcd prefix "/" gives an empty namespace`},
		{"/OBJ", `etcd prefix "/OBJ" gives namespace "OBJ": reserved`},
		{"/KV", `etcd prefix "/KV" gives namespace "KV": reserved`},
		{"/obj", `namespace "obj": reserved`},
		{"/" + strings.Repeat("x", MaxNamespaceLen+1), "65 bytes, at most 64"},
		{"/" + strings.Repeat("-", MaxNamespaceLen/2+1), "66 bytes, at most 64"},
	} {
		got, err := NamespaceOf(tc.prefix)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NamespaceOf(%q) = %q, %v; want an error containing %q", tc.prefix, got, err, tc.want)
		}
	}
}

func TestValidNamespace(t *testing.T) {
	for _, ok := range []string{"consumerd", "t1", "a-b", "-", "OBJECTS", "KV-1", "OBJx", strings.Repeat("a", MaxNamespaceLen)} {
		if err := ValidNamespace(ok); err != nil {
			t.Errorf("ValidNamespace(%q): %v", ok, err)
		}
	}
	for bad, want := range map[string]string{
		"":                                     `namespace "": must not be empty`,
		"a_b":                                  `namespace "a_b": illegal byte '_' at 1`,
		"a.b":                                  `illegal byte '.' at 1`,
		"a/b":                                  `illegal byte '/'`,
		"a b":                                  `illegal byte ' '`,
		"a*":                                   `illegal byte '*'`,
		"a>":                                   `illegal byte '>'`,
		"$JS":                                  `illegal byte '$' at 0`,
		"OBJ":                                  `namespace "OBJ": reserved (JetStream's own streams are named OBJ_<bucket>)`,
		"obj":                                  "reserved",
		"KV":                                   `namespace "KV": reserved (JetStream's own streams are named KV_<bucket>)`,
		"kV":                                   "reserved",
		strings.Repeat("a", MaxNamespaceLen+1): "65 bytes, at most 64",
	} {
		if err := ValidNamespace(bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidNamespace(%q) = %v, want an error containing %q", bad, err, want)
		}
	}
}

// Prefixes that differ only in the characters the mapping rewrites must
// never share a namespace, and no two (namespace, channel) pairs a stream
// or subject: the first '_' of a stream name ends its namespace.
func TestDistinctNamespacesNeverCollide(t *testing.T) {
	prefixes := []string{
		"/a/b", "/a-b", "/a_b", "/a.b", "/a--b", "/a-sb", "/a-ub", "/a-db", "/a/-b", "/a-/b",
		"/a//b", "/a b", "/a-x20b", "/ab", "/a", "/a/", "/a-", "/consumerd", "/consumerd/x",
		"/consumerd-x", "/consumerd_x", "/A/b",
	}
	seenNS := map[string]string{}
	seenName := map[string]string{}
	for _, p := range prefixes {
		ns, err := NamespaceOf(p)
		if err != nil {
			t.Fatalf("NamespaceOf(%q): %v", p, err)
		}
		if prev, dup := seenNS[ns]; dup {
			t.Fatalf("prefixes %q and %q both give namespace %q", prev, p, ns)
		}
		seenNS[ns] = p
		for _, ch := range []string{"words/0003", "b/words/0003", "recovery/s", "x_recovery/s", "s"} {
			n, err := channelNames(ns, ch)
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{n.stream, n.data, n.fence} {
				if prev, dup := seenName[key]; dup {
					t.Fatalf("%q and %q both map to %q", prev, p+" "+ch, key)
				}
				seenName[key] = p + " " + ch
			}
			if before, _, _ := strings.Cut(n.stream, "_"); before != ns {
				t.Fatalf("stream %q of namespace %q: its first '_' does not end the namespace", n.stream, ns)
			}
		}
	}
	// No channel stream is an object store's (the snapshot buckets').
	for ns, p := range seenNS {
		if who, dup := seenName["OBJ_"+ns+"-snapshots"]; dup {
			t.Fatalf("%s takes the stream of %s's snapshot bucket", who, p)
		}
	}
}

// prefixOf inverts NamespaceOf (tests only): a namespace decodes to exactly
// one prefix, so NamespaceOf is injective.
func prefixOf(ns string) (string, bool) {
	var b strings.Builder
	b.WriteByte('/')
	for i := 0; i < len(ns); i++ {
		if ns[i] != '-' {
			b.WriteByte(ns[i])
			continue
		}
		if i+1 >= len(ns) {
			return "", false
		}
		i++
		switch ns[i] {
		case '-':
			b.WriteByte('-')
		case 's':
			b.WriteByte('/')
		case 'd':
			b.WriteByte('.')
		case 'u':
			b.WriteByte('_')
		case 'x':
			if i+2 >= len(ns) || unhex(ns[i+1]) < 0 || unhex(ns[i+2]) < 0 {
				return "", false
			}
			b.WriteByte(byte(unhex(ns[i+1])<<4 | unhex(ns[i+2])))
			i += 2
		default:
			return "", false
		}
	}
	return b.String(), true
}

// Every namespace NamespaceOf gives is valid and decodes back to its prefix:
// distinct prefixes never share a namespace.
func FuzzNamespaceOfInjective(f *testing.F) {
	for _, p := range []string{"/consumerd", "/a/b", "/a_b", "/a-b", "/a--b", "/a-sb", "/ü", "/-xc3-xbc", "/\x00\xff"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		ns, err := NamespaceOf(p)
		if err != nil {
			return
		}
		if err := ValidNamespace(ns); err != nil {
			t.Fatalf("NamespaceOf(%q) = %q, invalid: %v", p, ns, err)
		}
		if back, ok := prefixOf(ns); !ok || back != p {
			t.Fatalf("NamespaceOf(%q) = %q, which decodes to %q (%v)", p, ns, back, ok)
		}
	})
}
