package api

import (
	"fmt"
	"sort"
)

// QueryResponse is the body of GET /v1/query, exported as that endpoint's
// JSON contract for Go clients that decode it. Keys and values are bytes
// (any, UTF-8 or not): each travels as "key" / "value" when its bytes are
// valid UTF-8 and as "key_b64" / "value_b64" (standard base64) otherwise,
// exactly one of each pair (see EncodeBytes).
type QueryResponse struct {
	App string `json:"app"`
	// Key or KeyB64 is the key asked for, on key queries.
	Key    *string `json:"key,omitempty"`
	KeyB64 *string `json:"key_b64,omitempty"`
	// Shards holds each asked shard's entries, sorted by key bytes. A key
	// query of a shard that lacks the key has an empty list.
	Shards map[string][]QueryEntry `json:"shards"`
	// Found, and Value or ValueB64 when found, answer a key query over the
	// app (no shard parameter): whether any asked shard had the key, and
	// its values merged with the app's Merge.
	Found    *bool   `json:"found,omitempty"`
	Value    *string `json:"value,omitempty"`
	ValueB64 *string `json:"value_b64,omitempty"`
	// Entries is, for all=1 over the app (no shard parameter), every key
	// and its value merged over the shards, sorted by key bytes.
	Entries []QueryEntry `json:"entries,omitempty"`
	// Partial, set only when the request said partial=1, says which shards
	// the answer is missing and why.
	Partial string `json:"partial,omitempty"`
}

// QueryEntry is one key and its value in QueryResponse.Shards.
type QueryEntry struct {
	Key      *string `json:"key,omitempty"`
	KeyB64   *string `json:"key_b64,omitempty"`
	Value    *string `json:"value,omitempty"`
	ValueB64 *string `json:"value_b64,omitempty"`
}

// ErrorResponse is the body of every answer of /v1/query other than 200 OK.
type ErrorResponse struct {
	Error string `json:"error"`
}

// EncodeEntries renders one shard's values as entries sorted by key bytes.
func EncodeEntries(vals map[string]string) []QueryEntry {
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]QueryEntry, len(keys))
	for i, k := range keys {
		var e QueryEntry
		e.Key, e.KeyB64 = EncodeBytes(k)
		e.Value, e.ValueB64 = EncodeBytes(vals[k])
		out[i] = e
	}
	return out
}

// DecodeEntries is the inverse of EncodeEntries: an entry that is not one
// key and one value, or a key given twice, is an error naming the entry.
func DecodeEntries(es []QueryEntry) (map[string]string, error) {
	vals := make(map[string]string, len(es))
	for i, e := range es {
		k, err := DecodeBytes("key", e.Key, e.KeyB64)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		v, err := DecodeBytes("value", e.Value, e.ValueB64)
		if err != nil {
			return nil, fmt.Errorf("entry %d (key %s): %w", i, DescribeKey(k), err)
		}
		if _, dup := vals[k]; dup {
			return nil, fmt.Errorf("entry %d: key %s appears twice", i, DescribeKey(k))
		}
		vals[k] = v
	}
	return vals, nil
}
