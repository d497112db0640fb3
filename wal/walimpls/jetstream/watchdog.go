package jetstream

import (
	"time"
)

// watchTicks is how many watchdog ticks make one AckTimeout.
const watchTicks = 4

// epochRing is how many epochs' start times the watchdog remembers; an
// append older than that is stale whatever the times.
const epochRing = 64

// watch is the opener's watchdog (one goroutine, stopped by Close). It bounds
// the wait for replies, which nats.go would otherwise do with one timer per
// append: every AckTimeout/watchTicks it advances the epoch (appends record
// it when published, with no clock read per append) and fails every append
// that has waited for its reply for at least AckTimeout (it was published
// before the start of an epoch that began AckTimeout ago; so it fails
// between 1 and about 1.25 AckTimeout after it was sent) with a retryable
// error wrapping ErrJetStreamPublisherClosed: the adaptor retries it. A lost
// reply, e.g. after a cluster leader change without a reconnect, so never
// stalls the connection; a reply for an append already failed is ignored.
func (o *opener) watch() {
	defer close(o.watchDone)
	t := time.NewTicker(max(o.cfg.AckTimeout/watchTicks, time.Millisecond))
	defer t.Stop()
	var began [epochRing]time.Time // began[e%epochRing]: epoch e had begun by then
	for {
		select {
		case <-o.stopWatch:
			return
		case <-t.C:
		}
		now := o.epoch.Add(1)
		began[now%epochRing] = time.Now() // read after the increment: never before the epoch began
		if n := o.failFast(func(p *pending) bool { return o.isStale(p.epoch, now, &began) }, o.ackTimeoutErr); n > 0 {
			o.log.Warn("appends unacknowledged after the ack timeout; failing them so they are retried",
				"url", o.cfg.URL, "ack_timeout", o.cfg.AckTimeout, "stale", n)
		}
	}
}

// isStale reports whether an append published in epoch e has waited at least
// AckTimeout at the start of epoch now.
func (o *opener) isStale(e, now uint64, began *[epochRing]time.Time) bool {
	next := e + 1
	switch {
	case next > now:
		return false // published in the current epoch
	case now-next >= epochRing-1:
		return true
	default:
		return began[now%epochRing].Sub(began[next%epochRing]) >= o.cfg.AckTimeout
	}
}
