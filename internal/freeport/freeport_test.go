package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPickIsBelowTheEphemeralRangeAndBindable: every port Pick returns can
// be listened on and lies outside the range outgoing connections draw from.
func TestPickIsBelowTheEphemeralRangeAndBindable(t *testing.T) {
	hi := ephemeralLow()
	if hi == 0 {
		t.Skip("no ephemeral range known on this machine; Pick falls back to the kernel")
	}
	for range 50 {
		p := Port(t)
		if p < lowest || p >= hi {
			t.Fatalf("port %d outside [%d, %d)", p, lowest, hi)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d from Pick cannot be bound: %v", p, err)
		}
		_ = l.Close()
	}
}

// TestPickNeverRepeats: a test picks all its ports before it binds any,
// so no two picks of a process may be the same port (with random picks
// from some 12,000 ports, 2,000 picks repeat one almost surely).
func TestPickNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for i := range 2000 {
		p := Port(t)
		if seen[p] {
			t.Fatalf("pick %d returned port %d again", i, p)
		}
		seen[p] = true
	}
}
