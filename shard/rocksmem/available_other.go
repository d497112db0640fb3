//go:build !linux

package rocksmem

// Available is the memory this process may use: unknown here (0), so
// DefaultBytes is its floor.
func Available() uint64 { return 0 }
