package recoverylog

import (
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/consumerd/consumerd/wal/message"
)

// DefaultProgressInterval is how often a replay that has not caught up logs
// its progress.
const DefaultProgressInterval = 5 * time.Second

// replayProgress logs, every interval until the replay reaches the last id
// it saw at start, how much it replayed, how fast, and what is left: a long
// BACKFILL says what it is doing instead of only "started" and "caught up".
type replayProgress struct {
	logger   hclog.Logger
	interval time.Duration
	start    time.Time
	last     time.Time
	from, to message.MessageID // ids: the DB's position, the log's last at start
	records  int64
	bytes    int64
	left     prometheus.Gauge
}

func newReplayProgress(logger hclog.Logger, shard string, interval time.Duration, start time.Time, from, to message.MessageID) *replayProgress {
	if interval <= 0 {
		interval = DefaultProgressInterval
	}
	left := replayRemaining.WithLabelValues(shard)
	left.Set(float64(to - min(from, to)))
	return &replayProgress{logger: logger, interval: interval, start: start, last: start, from: from, to: to, left: left}
}

// add counts one record read at id and logs when an interval has passed.
func (p *replayProgress) add(bytes int, id message.MessageID, now time.Time) {
	p.records++
	p.bytes += int64(bytes)
	p.left.Set(float64(p.to - min(id, p.to)))
	if id >= p.to || now.Sub(p.last) < p.interval {
		return
	}
	p.last = now
	elapsed := now.Sub(p.start).Seconds()
	done, left := float64(id-p.from), float64(p.to-id)
	var eta time.Duration
	if done > 0 && elapsed > 0 {
		eta = time.Duration(left / (done / elapsed) * float64(time.Second)).Round(time.Second)
	}
	p.logger.Info("recovery log replay progress", "records", p.records, "bytes", p.bytes,
		"records_per_s", int64(float64(p.records)/elapsed), "bytes_per_s", int64(float64(p.bytes)/elapsed),
		"log_id", id, "last_id", p.to, "remaining_ids", p.to-id, "eta", eta.String())
}
