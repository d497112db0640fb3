// Package wal is the write-ahead log callers use (after Milvus' streaming
// WAL): an OpenerBuilder builds an Opener (a backend connection); the Opener
// opens a WAL on a named channel with a fencing term; a WAL appends messages
// (Append, AppendAsync) and opens Scanners that deliver the channel's
// messages in id order from a DeliverPolicy (All, Latest, StartFrom,
// StartAfter). Channel names of topic partitions and recovery logs are
// chosen by the packages above (topic, recoverylog); wal knows nothing of
// them.
//
// NewOpenerBuilder wraps any walimpls backend (memory, jetstream) in the
// adaptor, which adds what backends need not implement:
//
//   - Ordering: appends from one goroutine (sync or async) are stored in
//     call order and AppendAsync callbacks run in the order the appends were
//     accepted, one at a time. When the backend implements
//     walimpls.AsyncAppender, callers hand appends to it directly (in order,
//     under a mutex) with up to a window of them in flight
//     (WithAsyncWindow), and outcomes are delivered from the backend's
//     acknowledgements without a goroutine hop; a transient failure switches
//     to an ordered recovery on a WAL-owned goroutine. Otherwise one
//     dispatcher goroutine appends one message at a time.
//   - Retries with exponential backoff (WithRetry) for transient backend
//     errors; never for ErrFenced, ErrClosed, ErrTruncated, an ended context
//     or errors marked walimpls.Permanent. A pipelined append that failed
//     after a later one was stored is reported, not retried out of order.
//   - Availability: Available is closed once an append hits ErrFenced or the
//     WAL is closed; later appends fail at once.
//   - Scanners: MessageFilter, delivery through Scanner.Chan (the default
//     ChanMessageHandler) or a caller's MessageHandler (see HandleParam and
//     HandleResult for the exact protocol), prompt Close, and Error saying
//     why the scanner stopped (ErrScannerClosed, ErrClosed, ErrTruncated, a
//     ctx error, or the handler's error).
//   - Metrics on the default Prometheus registry, labelled by backend:
//     consumerd_wal_appends_total, consumerd_wal_append_bytes_total,
//     consumerd_wal_append_errors_total{reason}, consumerd_wal_append_retries_total,
//     consumerd_wal_append_duration_seconds,
//     consumerd_wal_scanner_messages_total and
//     consumerd_wal_scanner_filtered_messages_total.
//   - Logging through hclog (WithLogger), with "backend" and "channel" fields.
//
// Ownership: each WAL owns its dispatcher goroutine (serial backends), its
// recovery goroutines (pipelining backends, only while recovering from a
// transient failure) and its scanners' goroutines; WAL.Close stops them all, and Opener.Close closes WALs still
// open. Tests run under goleak.
package wal
