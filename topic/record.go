package topic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// A topic's home is its record in etcd, <root>/topics/<name>, holding the
// Description as JSON ({"name":"words","partitions":4}). The partition count
// comes from there and nowhere else: publishers route by it, `shards create`
// makes one shard per partition, and it never changes (changing it would
// re-route every key).

// KeyPrefix is the etcd prefix of every topic record under root.
func KeyPrefix(root string) string { return strings.TrimSuffix(root, "/") + "/topics/" }

// Key is the etcd key of topic name's record under root.
func Key(root, name string) string { return KeyPrefix(root) + name }

// Encode is the record's value.
func (d Description) Encode() []byte {
	b, _ := json.Marshal(d) // a struct of a string and an int: cannot fail
	return b
}

// DecodeRecord decodes the record found at key (under root): strict JSON
// (an unknown field, such as a misspelt "partition", is an error), a name
// that matches the key when given, and a valid Description. Errors name the
// key.
func DecodeRecord(root, key string, raw []byte) (Description, error) {
	name, ok := strings.CutPrefix(key, KeyPrefix(root))
	if !ok || name == "" || strings.Contains(name, "/") {
		return Description{}, fmt.Errorf("topic record %s: not a key <root>/topics/<name>", key)
	}
	var d Description
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return Description{}, fmt.Errorf("topic record %s: %w (want {\"name\":%q,\"partitions\":N})", key, err, name)
	}
	if d.Name == "" {
		d.Name = name
	}
	if d.Name != name {
		return Description{}, fmt.Errorf("topic record %s: name %q does not match the key", key, d.Name)
	}
	if err := d.Validate(); err != nil {
		return Description{}, fmt.Errorf("topic record %s: %w", key, err)
	}
	return d, nil
}
