// Package ident is consumerd's one rule for the names that become parts of
// etcd keys, WAL channel names and directories: shard, app, topic, member
// and zone ids (DESIGN §5). It is a leaf package so that topic, allocator,
// shard and daemon all use the same rule without importing each other.
package ident

import "fmt"

// MaxLen is the longest valid id, in characters (bytes: valid ids are
// ASCII).
const MaxLen = 200

// Check reports whether id is a valid id: non-empty, at most MaxLen
// characters of [A-Za-z0-9._-], and neither "." nor "..". The error names
// the value (quoted) but not what it is: callers prefix the field or flag,
// e.g. fmt.Errorf("--member.id: %w", err).
//
// "." and ".." are rejected because ids are also path components
// (<data-dir>/shards/<shard>) and key segments: shard ".." would put its
// database in the data directory itself. '/' is rejected because it
// separates key segments and a topic from its partition in channel names.
func Check(id string) error {
	if id == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(id) > MaxLen {
		return fmt.Errorf("%q... (%d bytes) is longer than %d characters", id[:40], len(id), MaxLen)
	}
	if id == "." || id == ".." {
		return fmt.Errorf("%q is not allowed (it is a path component)", id)
	}
	for i, r := range id {
		if !valid(r) {
			return fmt.Errorf("%q: character %q at byte %d is not one of [A-Za-z0-9._-]", id, r, i)
		}
	}
	return nil
}

func valid(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}
