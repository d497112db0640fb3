package server

import (
	"context"
	"strings"
	"time"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/shard"
)

// unreadCheckInterval is how often the leader looks for topic partitions no
// shard reads.
const unreadCheckInterval = 30 * time.Second

// watchUnread logs, on the leader, a WARN naming every topic partition that
// no shard reads (messages published there are never consumed), at start and
// whenever the set has changed at a check, until ctx ends.
func (s *server) watchUnread(ctx context.Context, member *allocator.Member) {
	t := time.NewTicker(unreadCheckInterval)
	defer t.Stop()
	last := ""
	for {
		ks := member.KeySpace()
		if ks.Leader() == member.Zone()+"/"+member.ID() {
			if ts, err := s.topics.List(ctx); err != nil {
				if ctx.Err() == nil {
					s.log.Debug("checking for unread partitions", "error", err)
				}
			} else {
				var b strings.Builder
				cluster.WarnUnread(&b, ts, shard.Specs(ks.Snapshot()))
				if now := b.String(); now != last {
					for _, line := range strings.Split(strings.TrimSpace(now), "\n") {
						if line != "" {
							s.log.Warn(strings.TrimPrefix(line, "WARNING: "))
						}
					}
					last = now
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
