package rocksmem

// The default budget is a quarter of the memory the process may use, within
// these bounds: the rest is for the Go heap (transactions, outputs), the
// page cache the databases read through, and, on the embedded default,
// etcd and nats-server.
const (
	defaultShareDivisor = 4
	defaultFloor        = 256 << 20
	defaultCeiling      = 16 << 30
)

// DefaultBytes is the budget for a process given none: a quarter of
// Available(), at least 256 MiB and at most 16 GiB.
func DefaultBytes() uint64 {
	return min(max(Available()/defaultShareDivisor, defaultFloor), defaultCeiling)
}
