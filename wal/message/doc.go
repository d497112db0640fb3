// Package message defines the messages that travel through a WAL channel:
// MutableMessage (what an appender hands in: key, payload, properties and an
// optional dedupe id) and ImmutableMessage (what a scanner hands out: the same
// plus the channel, the MessageID the backend assigned, and the append time).
//
// MessageID is a per-channel offset: a uint64 that only grows and is never
// reused; zero means "no message".
package message
