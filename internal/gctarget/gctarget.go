package gctarget

import (
	"os"
	"runtime/debug"
)

// Default is the GC target a member runs with when GOGC is not set: the
// heap may grow to five times its live size between collections.
const Default = 400

// Apply sets the GC target to Default unless the GOGC environment variable
// is set (the runtime then already applied it), and returns the target in
// effect (-1: off) and where it came from ("GOGC" or "default").
func Apply() (percent int, source string) {
	if _, ok := os.LookupEnv("GOGC"); ok {
		p := debug.SetGCPercent(100)
		debug.SetGCPercent(p)
		return p, "GOGC"
	}
	debug.SetGCPercent(Default)
	return Default, "default"
}
