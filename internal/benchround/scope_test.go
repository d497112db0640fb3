package benchround

import (
	"os"
	"slices"
	"testing"
)

// A scope releases what a round registered when the round ends, newest
// first, and not again at the benchmark's end; its temp dirs go with it.
func TestScopeReleasesAtClose(t *testing.T) {
	var order []string
	var dir string
	t.Run("bench", func(t *testing.T) {
		s := NewScope(t)
		s.Cleanup(func() { order = append(order, "first") })
		s.Cleanup(func() { order = append(order, "second") })
		dir = s.TempDir()
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("temp dir: %v", err)
		}
		s.Close()
		if want := []string{"second", "first"}; !slices.Equal(order, want) {
			t.Fatalf("after Close: ran %v, want %v", order, want)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("temp dir %s still there after Close: %v", dir, err)
		}
		// Registered after Close: runs with the benchmark's own cleanups.
		s.Cleanup(func() { order = append(order, "late") })
		if len(order) != 2 {
			t.Fatalf("a cleanup registered after Close ran at once: %v", order)
		}
		s.Close()
	})
	if want := []string{"second", "first", "late"}; !slices.Equal(order, want) {
		t.Fatalf("at the end: ran %v, want %v", order, want)
	}
}

// A round that stops early (Fatal) without closing its scope is released
// with the benchmark.
func TestScopeReleasedWithTB(t *testing.T) {
	ran := false
	t.Run("bench", func(t *testing.T) {
		NewScope(t).Cleanup(func() { ran = true })
	})
	if !ran {
		t.Fatal("an unclosed scope's cleanup did not run at the TB's end")
	}
}
