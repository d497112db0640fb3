// Package memory is an in-process WAL backend (walimpls) for fast tests and
// fault injection.
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
// Fault injection: SetAppendHook installs a function consulted on every Append
// at BeforeStore (an error fails the append, nothing stored) and AfterStore
// (an error fails the append although the message is stored: a lost ack); the
// hook may block to inject delays. EnableAsyncAppend makes WALs implement
// walimpls.AsyncAppender so the adaptor's pipelined path can be exercised.
package memory
