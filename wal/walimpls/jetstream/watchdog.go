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
// the wait for acknowledgements, which nats.go would otherwise do with one
// timer per append: every AckTimeout/watchTicks it advances the epoch (appends
// record it when published, with no clock read per append) and, if an append
// has been waiting for its acknowledgement for at least AckTimeout (it was
// published before the start of an epoch that began AckTimeout ago; so it
// fails between 1 and about 1.25 AckTimeout after it was sent), it calls
// CleanupPublisher. That fails every async publish of the connection still
// waiting (through onErr, with ErrJetStreamPublisherClosed, a retryable
// error: the adaptor retries them) and leaves the JetStream context usable —
// a lost acknowledgement, e.g. after a cluster leader change without a
// reconnect, never stalls the connection. Acknowledgements of the failed
// publishes that still arrive are ignored. CleanupPublisher is safe beside
// concurrent publishes (nats.go serialises them on its publisher lock and
// recreates the reply subscription on the next publish); a publish racing
// with it may lose its acknowledgement, and then the next round fails it.
// Term-0 appends (unfenced.go) are in the opener's own table: the watchdog
// fails just the stale ones, with the same retryable error.
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
			o.log.Warn("term-0 appends unacknowledged after the ack timeout; failing them so they are retried",
				"url", o.cfg.URL, "ack_timeout", o.cfg.AckTimeout, "stale", n)
		}
		if n := o.stale(now, &began); n > 0 {
			o.log.Warn("appends unacknowledged after the ack timeout; failing every pending append of the connection so they are retried",
				"url", o.cfg.URL, "ack_timeout", o.cfg.AckTimeout, "stale", n, "pending", o.js.PublishAsyncPending())
			o.js.CleanupPublisher()
		}
	}
}

// stale counts the appends that have waited at least AckTimeout at the start
// of epoch now: those published in an epoch e whose successor e+1 began
// AckTimeout ago or earlier.
func (o *opener) stale(now uint64, began *[epochRing]time.Time) int {
	n := 0
	for i := range o.pend {
		sh := &o.pend[i]
		sh.mu.Lock()
		for _, p := range sh.m {
			if o.isStale(p.epoch, now, began) {
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
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
