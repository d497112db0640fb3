package topic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// A topic's home is its record in etcd, <root>/topics/<name>, holding the
// Description as JSON ({"name":"words","partitions":4}). The partition count
// comes from there and nowhere else: publishers route by it, `shards create`
// makes one shard per partition, and it never changes (changing it would
// re-route every key). Registry reads and writes the records; this file is
// their key and encoding.

// KeyPrefix is the etcd prefix of every topic record under root.
func KeyPrefix(root string) string { return strings.TrimSuffix(root, "/") + "/topics/" }

// Key is the etcd key of topic name's record under root.
func Key(root, name string) string { return KeyPrefix(root) + name }

// Encode is the record's value.
func (d Description) Encode() []byte {
	b, _ := json.Marshal(d) // a struct of a string and an int: cannot fail
	return b
}

// ErrBadRecord is wrapped by DecodeRecord's errors: the record in etcd is
// not a topic's (a person must mend it), unlike a failure to read it.
var ErrBadRecord = errors.New("topic record does not decode")

// recordError is DecodeRecord's error: it names the key, is ErrBadRecord
// (errors.Is) and wraps the cause.
type recordError struct {
	key string
	err error
}

func (e *recordError) Error() string        { return "topic record " + e.key + ": " + e.err.Error() }
func (e *recordError) Unwrap() error        { return e.err }
func (e *recordError) Is(target error) bool { return target == ErrBadRecord }

// DecodeRecord decodes the record found at key (under root): strict JSON
// (an unknown field, such as a misspelt "partition", is an error), a name
// that matches the key when given, and a valid Description. Errors name the
// key and wrap ErrBadRecord.
func DecodeRecord(root, key string, raw []byte) (Description, error) {
	name, ok := strings.CutPrefix(key, KeyPrefix(root))
	if !ok || name == "" || strings.Contains(name, "/") {
		return Description{}, &recordError{key, errors.New("not a key <root>/topics/<name>")}
	}
	var d Description
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return Description{}, &recordError{key, fmt.Errorf("%w (want {\"name\":%q,\"partitions\":N})", err, name)}
	}
	if d.Name == "" {
		d.Name = name
	}
	if d.Name != name {
		return Description{}, &recordError{key, fmt.Errorf("name %q does not match the key", d.Name)}
	}
	if err := d.Validate(); err != nil {
		return Description{}, &recordError{key, err}
	}
	return d, nil
}
