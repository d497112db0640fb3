// Package wal is the write-ahead log callers use (after Milvus' streaming
// WAL): an Opener opens WALs on named channels; a WAL appends messages
// (Append, AppendAsync) and opens Scanners that deliver messages in id order.
//
// NewOpenerBuilder wraps any walimpls backend (memory, jetstream) in the
// adaptor, which adds what backends need not implement: call-order async
// appends through one dispatcher per WAL (pipelined when the backend
// implements walimpls.AsyncAppender), retries with exponential backoff for
// transient backend errors (never for ErrFenced, ErrClosed, ErrTruncated or
// an ended context), availability (Available closes on ErrFenced or Close),
// message filters, MessageHandler delivery and Prometheus metrics
// (consumerd_wal_*).
package wal
