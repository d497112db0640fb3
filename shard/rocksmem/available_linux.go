package rocksmem

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Available is the memory this process may use: the machine's, or its
// cgroup's limit (cgroup v2 memory.max) when that is lower. 0 when neither
// can be read.
func Available() uint64 {
	var total uint64
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		total = uint64(si.Totalram) * uint64(si.Unit)
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if lim, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && (total == 0 || lim < total) {
			total = lim // "max" (no limit) does not parse
		}
	}
	return total
}
