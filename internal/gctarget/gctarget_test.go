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

// TestApplyMemoryLimit: half the available memory unless GOMEMLIMIT is set,
// and then what GOMEMLIMIT said; unknown memory leaves the limit alone.
func TestApplyMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	t.Setenv("GOMEMLIMIT", "") // restored after the test
	os.Unsetenv("GOMEMLIMIT")

	const available = 8 << 30
	if l, src := ApplyMemoryLimit(available); l != 4<<30 || src != "default" || debug.SetMemoryLimit(-1) != 4<<30 {
		t.Fatalf("without GOMEMLIMIT: %d from %s, runtime has %d", l, src, debug.SetMemoryLimit(-1))
	}
	debug.SetMemoryLimit(NoLimit)
	if l, src := ApplyMemoryLimit(0); l != NoLimit || src != "unknown" || debug.SetMemoryLimit(-1) != NoLimit {
		t.Fatalf("without GOMEMLIMIT, memory unknown: %d from %s, runtime has %d", l, src, debug.SetMemoryLimit(-1))
	}

	// The runtime reads GOMEMLIMIT at start; a set GOMEMLIMIT is left as
	// the runtime applied it (here: the 3 GiB set below stands for it).
	t.Setenv("GOMEMLIMIT", "3GiB")
	debug.SetMemoryLimit(3 << 30)
	if l, src := ApplyMemoryLimit(available); l != 3<<30 || src != "GOMEMLIMIT" || debug.SetMemoryLimit(-1) != 3<<30 {
		t.Fatalf("with GOMEMLIMIT=3GiB: %d from %s, runtime has %d", l, src, debug.SetMemoryLimit(-1))
	}
}
