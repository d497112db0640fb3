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
//   - Ordering (pipeline.go): appends from one goroutine (sync or async) are
//     stored in call order and AppendAsync callbacks run in the order the
//     appends were accepted, one at a time. Callers hand appends to the
//     backend's walimpls.AsyncAppender directly (in order, under a mutex),
//     up to a window of them in flight (WithAsyncWindow); the backend
//     reports each outcome as it arrives, in any order, and the adaptor
//     delivers them from the ring in call order on the goroutine that
//     completed the head — no goroutine in between. A backend without
//     AsyncAppender takes the same path, each append completing during its
//     hand-off. There is one path: no serial mode.
//   - Retries (settle.go), with the one retry policy of internal/retry
//     (WithRetry), for transient backend errors; never for ErrFenced,
//     ErrClosed, ErrTruncated, an ended context or errors marked
//     walimpls.Permanent. A failure at the head of the window drains it and
//     a WAL-owned recovery goroutine settles it (planSettle, pure and tested
//     by table in testdata/settle). On a fenced WAL every append gets a
//     DedupeID, transient failures are retried in order and, after a final
//     failure, the rest of the window fails too, so what is stored stays a
//     prefix of what was accepted; on a term-0 WAL an append that failed
//     after a later one was stored is reported, not retried out of order.
//   - Availability: Available is closed once an append hits ErrFenced or the
//     WAL is closed; later appends fail at once.
//   - Scanners (scanner.go): MessageFilter, delivery through a
//     MessageHandler (see HandleParam and HandleResult for the exact
//     protocol) — a caller's, or the default ChanMessageHandler behind
//     Scanner.Chan; every message takes that one path, and the message held
//     between steps lives in the scanner, so a step costs no allocation —
//     prompt Close, and Error saying why the scanner stopped
//     (ErrScannerClosed, ErrClosed, ErrTruncated, a ctx error, or the
//     handler's error).
//   - Metrics on the default Prometheus registry, labelled by backend:
//     consumerd_wal_appends_total, consumerd_wal_append_bytes_total,
//     consumerd_wal_append_errors_total{reason}, consumerd_wal_append_retries_total,
//     consumerd_wal_append_duration_seconds,
//     consumerd_wal_scanner_messages_total and
//     consumerd_wal_scanner_filtered_messages_total.
//   - Logging through hclog (WithLogger), with "backend" and "channel" fields.
//
// Ownership: each WAL owns its recovery goroutine (only while recovering
// from a failure) and its scanners' goroutines; WAL.Close stops them, and
// Opener.Close closes WALs still open. Tests run under goleak.
package wal
