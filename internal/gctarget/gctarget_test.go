package gctarget

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestApply: Default unless GOGC is set, and then what GOGC said.
func TestApply(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	t.Setenv("GOGC", "") // restored after the test
	os.Unsetenv("GOGC")
	if p, src := Apply(); p != Default || src != "default" || debug.SetGCPercent(Default) != Default {
		t.Fatalf("without GOGC: %d from %s", p, src)
	}
	// The runtime reads GOGC at start; a set GOGC is left as the runtime
	// applied it (here: the 150 set below stands for it).
	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150)
	if p, src := Apply(); p != 150 || src != "GOGC" || debug.SetGCPercent(150) != 150 {
		t.Fatalf("with GOGC=150: %d from %s", p, src)
	}
}
