package ident_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/internal/ident"
)

func TestCheck(t *testing.T) {
	for _, id := range []string{"a", "wordcount-0002", "A.b_c-9", "...", ".a", "a..b", "-", strings.Repeat("x", 200)} {
		if err := ident.Check(id); err != nil {
			t.Errorf("Check(%q) = %v, want nil", id, err)
		}
	}
	for _, c := range []struct{ id, mention string }{
		{"", "must not be empty"},
		{".", `"." is not allowed`},
		{"..", `".." is not allowed`},
		{"a/b", `"a/b": character '/' at byte 1 is not one of [A-Za-z0-9._-]`},
		{"a b", `character ' ' at byte 1`},
		{"wörds", `"wörds": character 'ö' at byte 1`},
		{"x\x00", `character '\x00' at byte 1`},
		{strings.Repeat("y", 201), `"` + strings.Repeat("y", 40) + `"... (201 bytes) is longer than 200 characters`},
	} {
		err := ident.Check(c.id)
		if err == nil || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("Check(%q) = %v, want an error containing %q", c.id, err, c.mention)
		}
	}
}

// reference is the rule as DESIGN §5 states it, written independently.
var reference = regexp.MustCompile(`^[A-Za-z0-9._-]{1,200}$`)

func FuzzCheck(f *testing.F) {
	for _, s := range []string{"", ".", "..", "...", "a/b", "wordcount-0001", "ä", strings.Repeat("z", 201)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		want := reference.MatchString(id) && id != "." && id != ".."
		err := ident.Check(id)
		if (err == nil) != want {
			t.Fatalf("Check(%q) = %v, want valid=%v", id, err, want)
		}
	})
}
