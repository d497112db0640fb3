package shard

// FillCommitGate takes every free slot of s's commit gate, as commits of
// other primaries in flight would, until release (tests).
func FillCommitGate(s *Service) (release func()) {
	n := 0
	for {
		select {
		case s.commits.slots <- struct{}{}:
			n++
			continue
		default:
		}
		break
	}
	return func() {
		for ; n > 0; n-- {
			<-s.commits.slots
		}
	}
}
