package shard

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/consumerd/consumerd/wal/message"
)

// lagTracker keeps a primary's per-source lag: the channel's last id minus
// the committed offset. It is not clamped at 0: a last id below the offset
// is reported as a negative lag (and a WARN), for it means the channel lost
// messages the shard read (its scanner stops on that as soon as it sees
// it). A last id the tracker learnt before a commit is raised to the
// committed offset, as the channel held what was consumed: a stale answer
// is not taken for a loss.
type lagTracker struct {
	r         *replica
	sources   []*source
	mu        sync.Mutex
	committed map[string]message.MessageID
	last      map[string]message.MessageID
	warned    map[string]bool // channels whose loss was logged
	// active: a commit since the last refresh (lagRefresher asks an idle
	// primary's sources less often).
	active atomic.Bool
}

func (l *lagTracker) commit(offsets map[string]message.MessageID) {
	l.active.Store(true)
	l.mu.Lock()
	for k, v := range offsets {
		l.committed[k] = v
		if last, ok := l.last[k]; ok && last < v {
			l.last[k] = v
		}
	}
	l.mu.Unlock()
	l.publish(nil)
}

// committedOf is the offset of channel the primary committed last.
func (l *lagTracker) committedOf(channel string) message.MessageID {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.committed[channel]
}

// refresh asks each source's channel for its last id. One below the offset
// committed before the question is a loss; the answer is otherwise raised
// to what was committed meanwhile.
func (l *lagTracker) refresh(ctx context.Context) {
	l.mu.Lock()
	before := make(map[string]message.MessageID, len(l.committed))
	for k, v := range l.committed {
		before[k] = v
	}
	l.mu.Unlock()
	last := make(map[string]message.MessageID, len(l.sources))
	for _, s := range l.sources {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		id, err := s.log.LastID(cctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				l.r.logger.Debug("source last id", "channel", s.channel, "error", err)
			}
			continue
		}
		last[s.channel] = id
	}
	var behind []string
	l.mu.Lock()
	if l.last == nil {
		l.last = make(map[string]message.MessageID)
	}
	for k, v := range last {
		if v < before[k] {
			if !l.warned[k] {
				behind = append(behind, k)
			}
		} else {
			v = max(v, l.committed[k])
		}
		l.last[k] = v
	}
	l.mu.Unlock()
	l.publish(behind)
}

// publish makes the lag the replica's and the metric's; behind are the
// channels found below their offsets, logged once each.
func (l *lagTracker) publish(behind []string) {
	l.mu.Lock()
	lag := make(map[string]int64, len(l.sources))
	offsets := make(map[string]message.MessageID, len(l.sources))
	for _, s := range l.sources {
		lag[s.channel] = int64(l.last[s.channel]) - int64(l.committed[s.channel])
		offsets[s.channel] = l.committed[s.channel]
	}
	for _, ch := range behind {
		if l.warned == nil {
			l.warned = map[string]bool{}
		}
		l.warned[ch] = true
	}
	l.mu.Unlock()
	for _, ch := range behind {
		l.r.logger.Warn("a source's last id is below the committed offset: the channel lost messages the shard read (negative lag)",
			"channel", ch, "lag", lag[ch], "committed", offsets[ch])
	}
	for ch, n := range lag {
		metricSourceLag.WithLabelValues(l.r.id, ch).Set(float64(n))
	}
	l.r.mu.Lock()
	l.r.lag = lag
	l.r.offsets = offsets
	l.r.mu.Unlock()
}
