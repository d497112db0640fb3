// Package windows gives consumerd apps event-time windows, watermarks and
// durable event-time timers, so that windowed aggregates and joins (the
// Nexmark queries, or an app's own) emit each window's result exactly once,
// complete, through failovers.
//
// Event time is int64 milliseconds since the Unix epoch. A Window is a
// half-open interval [Start, End); Tumble and Hop assign an event time to
// its windows. A window is complete once the watermark is ≥ its
// MaxTimestamp (End-1).
//
// The essential types:
//
//   - Tracker computes the shard's watermark: the minimum over its source
//     partitions. A timed partition (one whose events arrive in event-time
//     order, give or take a delay) derives it from event times; a marked
//     partition (fed by an upstream stage, interleaving several upstream
//     shards) derives it from the Marks those shards send.
//   - Mark is an upstream sender's promise that its later messages to a
//     partition have event time > Mark.Time. It travels as a message with an
//     empty payload and the property MarkProperty; Broadcast sends one to
//     every partition of a topic, MarkOf recognizes one.
//   - Timers are event-time timers kept in the shard's RocksDB with an
//     in-memory index; Due fires those at or before the watermark.
//
// Tracker and Timers persist their state through the open transaction
// (Shard.Transaction), so it commits atomically with the source offsets and
// a new primary, after Load in ShardIniter.InitShard, resumes exactly where
// the last committed transaction left off.
//
// # How an app uses it
//
// A windowed count over a stream, with its results sent on to a later
// stage (see the package example for a complete app):
//
//	InitShard: tracker.Load(s); timers.Load(s.Database(), s.ReadOptions())
//	Consume:   if m, ok, err := windows.MarkOf(env.Message); ok {
//	               tracker.ObserveMark(env.Partition, m)
//	           } else {
//	               decode ts; tracker.Observe(env.Partition, ts)
//	               w := windows.Tumble(ts, size)
//	               update w's state via s.Get / s.Transaction().Put
//	               timers.Set(s.Transaction(), w.MaxTimestamp(), key of w)
//	           }
//	Flush:     wm := tracker.Current()
//	           timers.Due(txn, wm, emit w's result and clear its state)
//	           if wm > tracker.Flushed() {
//	               windows.Broadcast(pub, output, windows.Mark{
//	                   Sender: s.Partition(), Senders: pub.Partitions(source topic), Time: wm})
//	           }
//	           tracker.Flush(txn)
//
// # Why results are exact
//
// Timers fire only in Consumer.Flush, after every message of the transaction
// has been applied, with the watermark those messages produced; a window's
// result so includes every event of the transaction.
//
// On a timed partition events arrive in event-time order, give or take
// delay ms. Its watermark is maxSeen-delay-1, so every event still to come
// (≥ maxSeen-delay) is above it, and no event falls in a window that has
// fired: none is late.
//
// On a marked partition, each upstream sender stages its window results
// before the mark that covers them: it Broadcasts after firing its own
// timers, in the same transaction, and consumerd publishes a transaction's
// outputs exactly once and, per partition, in the order staged. So when a
// receiver has a mark ≥ T from every one of its senders, it has every
// sender's data up to T, and fires a window only after all of it arrived.
// A receiver's Mark.Senders is the partition count of the upstream stage's
// source topic (one sender per upstream shard), and Mark.Sender the
// upstream shard's partition.
//
// Both hold across failover: the watermark state, the timers, the window
// state, the offsets and the staged outputs commit in one transaction, and
// a new primary Loads exactly that.
//
// Late data, an event with time ≤ Current() on a timed input (its input
// broke the order the delay allows), is the app's decision: Tracker.Late
// reports it, for an app that counts or drops it.
package windows
