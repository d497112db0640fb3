// Package jetstream is the NATS JetStream WAL backend: it implements the
// walimpls contract (and the optional walimpls.AsyncAppender) with
// github.com/nats-io/nats.go/jetstream. The daemon connects it to the
// embedded nats-server (internal/embednats) by default, or to a NATS cluster
// with streams replicated R=3 in production.
//
// # Layout
//
// Each channel is one stream, "<prefix>_<token>", where token is the channel
// name escaped by EscapeChannel (reversible, so distinct channels never share a
// stream). The stream captures two subjects:
//
//	<prefix>.<token>.data   the channel's messages
//	<prefix>.<token>.fence  fence records (payload and Consumerd-Term header: the term)
//
// A MessageID is the JetStream stream sequence of the message. Sequences are
// shared with fence records, so ids are strictly increasing but not
// contiguous; they never go backwards across reconnects or server restarts
// (the file store keeps them). Scanners are ordered consumers filtered on the
// data subject, so they never see fence records. A message's payload is the
// NATS payload unchanged; its key and properties travel URL-encoded in one
// Consumerd-Meta header; MutableMessage.DedupeID becomes Nats-Msg-Id, so
// JetStream drops a repeat within Config.DuplicateWindow and acknowledges it
// with the original id.
//
// # Fencing
//
// Open with a term T > 0 reads the latest fence record (term F). If T > F it
// appends a fence record carrying T, conditional on the fence subject's last
// sequence (Nats-Expected-Last-Subject-Sequence), so racing fences are
// totally ordered; if T < F the open succeeds but every append fails with
// ErrFenced; if T == F the writer continues the channel (a reopen).
//
// Appends of a term > 0 are conditional and form a chain: each carries a
// unique Nats-Msg-Id (the caller's DedupeID if set) and is conditional on its
// predecessor being the last message stored (Nats-Expected-Last-Msg-Id); the
// first append after Open or a resync is conditional on the stream's last
// sequence instead (Nats-Expected-Last-Sequence: the fence's sequence, or
// the last sequence read). The writer keeps the chain itself, so appends
// pipeline without waiting for each other (the server checks them in order;
// on replicated streams too). Any record stored by someone else — a newer
// term's fence, another writer's append — breaks the chain, and then every
// append sent after it is rejected as well (chaining on sequences alone would
// let the append after a rejected one match the sequence the foreign record
// took). On a rejection the writer holds new appends, collects the outcome of
// those in flight, reads the stream's last sequence and then the fence term:
// a higher term means ErrFenced, for this and every later append; otherwise
// another writer of the same or no term appended, and the rejected appends
// are re-sent in call order (at most 8 times each; a re-send keeps its
// Nats-Msg-Id, so one whose outcome was unknown is not stored twice).
//
// Term-0 appends (topic publishers) are unconditional: any number of
// concurrent term-0 appenders may share a channel, and fencing applies only to
// writers with a term > 0. A term-0 append on a fenced channel is stored; it
// only makes the fenced writer re-send (consumerd never does this: topic
// partitions are written with term 0, recovery logs only by their fenced
// primary).
//
// Cost: every fenced append carries the chain headers and a Nats-Msg-Id,
// which the server remembers for Config.DuplicateWindow (about 100 bytes
// each). Measured here (BenchmarkAppendFenced, 100-byte messages, one
// embedded server, 2 cores) the chained protocol runs at roughly half the
// rate of unconditional appends, in raw nats.go and through this backend
// alike; with recovery-log records of many KiB the difference shrinks. Lower
// the window for very high fenced append rates.
//
// # Acknowledgements
//
// Appends are published with PublishMsgAsync and settled by the connection's
// ack handlers: a term-0 append's callback runs on the connection's
// ack-processing goroutine (so it must not block), a fenced writer's from the
// WAL's goroutine, in call order. Nothing waits per append, so async appends
// through the wal adaptor run close to raw PublishAsync speed.
//
// The wait for an acknowledgement is bounded by one watchdog goroutine per
// connection (owned by the opener, stopped by Close) rather than a timer per
// append: appends record the watchdog's tick count (AckTimeout/4 per tick),
// and when one has waited longer than AckTimeout (at most 1.25 AckTimeout)
// the watchdog calls CleanupPublisher, which fails every append of the
// connection still waiting with a retryable error wrapping
// ErrJetStreamPublisherClosed (the wal adaptor retries them; like any append
// whose outcome is unknown, one that was stored may be stored again unless it
// carries a DedupeID — the same as nats.go's per-append timeout gave). So a
// lost acknowledgement — a cluster leader change without a reconnect — never
// stalls the connection.
//
// # Truncation
//
// Truncate(id) records id in the stream metadata ("consumerd.truncated") and
// then purges the data subject below id (fence records stay). Reads starting
// below the recorded point fail with ErrTruncated, and a scanner that was
// behind when a truncation removed positions it had not read yet stops with
// ErrTruncated — never a silent skip.
//
// # Limits
//
// A message larger than the server's max_payload (1 MiB by default) fails
// with a permanent error naming both sizes. Durability of an acknowledged
// append is the server's setting: see embednats.Config.SyncAlways (fsync each
// write) versus the default periodic fsync, and Config.Replicas.
//
// Essential types: Config, Builder (Name "jetstream", Build connects and
// names the URL on failure).
package jetstream
