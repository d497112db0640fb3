// Package query answers key and scan queries of an app's state over its
// shards, with one path for the CLI (`consumerd query`) and the member's
// GET /v1/query alike (Ask): route the request to the shards that can hold
// the answer (RouteFor: for an app keyed by a topic, only the reader of the
// key's partition; else every shard of the app), refuse an answer that would
// silently miss shards (Route.Incomplete), ask each routed shard's primary
// over HTTP (Gather, AskShard) and merge the values with the app's Merge.
//
// Keys and values are bytes: a request carries a key as key=K (percent
// encoded) or key_b64=B (KeyParam), an answer as api.QueryEntry (Entries),
// and the CLI prints "key value" lines (WriteKeyValues; --hex-keys for keys
// that would print ambiguously, PlainKey).
package query
