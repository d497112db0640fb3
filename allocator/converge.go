package allocator

import "context"

// converger is the leader's converge state.
type converger struct{ m *Member }

func (c *converger) init(m *Member) { c.m = m }

// round runs one schedule-and-converge round on snap. again reports that it
// wrote something and the caller should run another round right away.
func (c *converger) round(ctx context.Context, snap Snapshot) (again bool, err error) {
	return false, nil
}
