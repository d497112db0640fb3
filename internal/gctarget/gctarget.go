package gctarget

import (
	"math"
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

// MemoryLimitDivisor: the default soft memory limit is the memory the
// process may use divided by this, half of it. The other half is for what
// the Go heap limit does not count: RocksDB's budget (--rocksdb.memory, a
// quarter of the same memory by default) is C++ memory outside the Go
// heap, and the page cache the databases read through needs the rest.
const MemoryLimitDivisor = 2

// NoLimit is the soft memory limit that does not limit (Go's default).
const NoLimit = math.MaxInt64

// ApplyMemoryLimit sets Go's soft memory limit to available /
// MemoryLimitDivisor unless the GOMEMLIMIT environment variable is set (the
// runtime then already applied it). available is the memory the process
// may use, the machine's or its cgroup's (the member passes
// rocksmem.Available(), the source of --rocksdb.memory's default); 0 means
// unknown and leaves the limit as it is. It returns the limit in effect
// (NoLimit: none) and where it came from: "GOMEMLIMIT", "default" or
// "unknown" (available was 0).
//
// The limit is soft: the collector runs more often as the heap nears it
// (at GOGC 400 a member's heap may otherwise grow to five times its live
// size), but it is no cap and never fails an allocation.
func ApplyMemoryLimit(available uint64) (limit int64, source string) {
	if _, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		return debug.SetMemoryLimit(-1), "GOMEMLIMIT" // negative: read only
	}
	if available == 0 {
		return debug.SetMemoryLimit(-1), "unknown"
	}
	limit = int64(min(available/MemoryLimitDivisor, NoLimit))
	debug.SetMemoryLimit(limit)
	return limit, "default"
}
