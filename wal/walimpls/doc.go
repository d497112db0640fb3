// Package walimpls is the thin contract a WAL backend implements
// (after Milvus' streaming walimpls): OpenerBuilderImpls → OpenerImpls →
// WALImpls → ScannerImpls, plus the sentinel errors ErrFenced, ErrTruncated,
// ErrClosed and ErrScannerClosed, and a Registry that maps backend names to
// builders (Register/Get use a process-wide default registry).
//
// Optional extras a backend may offer: AsyncAppender (pipelined appends that
// keep call order; the adaptor uses it when present) and Permanent (marks an
// error the adaptor must not retry; IsRetryable says what the adaptor
// retries).
//
// Backends live in subpackages (memory, jetstream) and must pass the shared
// conformance suite in walimplstest. Everything callers want on top — async
// append, availability, retries, filters, handlers, metrics — is added once,
// by the adaptor in package wal, not by each backend.
package walimpls
