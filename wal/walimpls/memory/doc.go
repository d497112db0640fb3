// Package memory is an in-process WAL backend (walimpls) for fast tests and
// fault injection. It pipelines as the JetStream backend does, so tests on it
// run the adaptor's production path.
//
// A Builder owns a store of channels; every opener it builds shares that
// store, so channels, their messages and their id counters survive opener
// Close and rebuild (ids are never reused). Ids start at 1 and grow by one
// per stored message. Fencing follows walimpls.OpenOption: opening with a
// non-zero term raises the channel's term, and appends of WALs opened with a
// lower non-zero term fail with walimpls.ErrFenced; term 0 WALs are unfenced.
// Truncate drops messages below an id; reading from a dropped position, or a
// scanner falling behind a Truncate, fails with walimpls.ErrTruncated.
// Messages carrying a DedupeID already seen on the channel are acknowledged
// with the first id and not stored again.
//
// Appends (walimpls.AsyncAppender; Append is AppendAsync and a wait) are
// stored on the calling goroutine and reported from the opener's
// acknowledgement goroutine, like replies on a connection; ShuffleAcks makes
// that goroutine report the outcomes it has in a random order, as replies,
// timeouts and disconnects arriving on different paths may. A fenced WAL
// keeps its stored appends a prefix of its calls, as JetStream's chained
// appends do: after any failure, appends handed in before every outcome in
// flight was reported fail unstored, with a retryable error.
//
// Fault injection: SetAppendHook installs a function consulted on every
// append at BeforeStore (on the appending goroutine; an error fails the
// append, nothing stored) and AfterStore (on the acknowledgement goroutine;
// an error fails the append although the message is stored: a lost
// acknowledgement). The hook may block to inject delays.
package memory
