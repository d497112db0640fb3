// Package pipeline is consumerd's two-stage example: exactly-once outputs
// make a pipeline of stages exact end to end, with no dedupe logic in any
// reader.
//
//	lines --split--> tokens --tally--> totals
//
// split reads topic "lines" and publishes every whitespace-separated token
// (strings.Fields) of a message to topic "tokens", keyed by the token: it
// re-keys the stream, so each token's occurrences land in one partition of
// tokens whichever line they came from. It keeps no state of its own.
//
// tally reads "tokens" and keeps each token's count (key "t/<token>" in its
// RocksDB); a token lives on exactly one shard — the one reading the token's
// partition — so App.KeyedBy is "tokens" and `consumerd query --app tally
// --key W` asks only that shard. Every transaction publishes the counts it
// changed to topic "totals" (key = token, payload = the new count), so the
// last message of a key in totals is its current count.
//
// Both stages stage their outputs in the transaction (shard.Publisher):
// after any failure — a primary killed, frozen past its lease (a zombie),
// drained — tokens holds each token occurrence exactly once and tally's
// counts equal the corpus. Count is the reference model.
package pipeline
