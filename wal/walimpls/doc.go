// Package walimpls is the thin contract a WAL backend implements
// (after Milvus' streaming walimpls): OpenerBuilderImpls → OpenerImpls →
// WALImpls → ScannerImpls, plus the sentinel errors ErrFenced, ErrTruncated
// and ErrClosed, and a registry that maps backend names to builders.
//
// Backends live in subpackages (memory, jetstream) and must pass the shared
// conformance suite in walimplstest. Everything callers want on top — async
// append, availability, retries, filters, handlers, metrics — is added once,
// by the adaptor in package wal, not by each backend.
package walimpls
