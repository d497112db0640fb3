// Package api holds the JSON shapes consumerd answers with, for Go programs
// that decode them: the member's GET /v1/status (StatusResponse) and GET
// /v1/query (QueryResponse), and the client commands' -o json outputs
// (`shards list`: ShardRow, `members list`: MemberRow, `topics list`:
// TopicRow, `read`: ReadMessage). DESIGN.md §7 documents each; the field
// names and meanings are a contract, changed only by adding fields.
//
// Keys, values and payloads are bytes: a field F travels as "F" when its
// bytes are valid UTF-8 and as "F_b64" (standard base64) otherwise, exactly
// one of the two (EncodeBytes, DecodeBytes).
//
// The package is pure data: no I/O, no dependency on the rest of consumerd,
// so a program that only reads consumerd's answers imports nothing else.
package api
