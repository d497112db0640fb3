package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// ErrNotFound is wrapped by Store.Get and Store.Stat when the named object
// does not exist.
var ErrNotFound = errors.New("snapshot: object not found")

// ObjectInfo describes one stored object.
type ObjectInfo struct {
	// Name is the object's full name, e.g. "wc-0/sst/<sha256>.sst".
	Name string
	// Size is its length in bytes.
	Size int64
}

// Store keeps snapshot objects (SST files, the small non-SST files of each
// checkpoint, and manifests) by name. Names are slash-separated relative
// paths of non-empty elements, none of them "." or "..", without backslash
// or NUL, at most 1024 bytes; DirStore and JetStreamStore reject others.
//
// Contract, which every implementation must keep (the package tests run
// each store through the same suite):
//   - Put stores exactly size bytes read from r under name, replacing any
//     object of that name. It is atomic: until Put returns nil, Get and Stat
//     see the previous object (or none), never a partial one; a Put that
//     fails or is cancelled leaves the previous object. A reader that yields
//     more or fewer than size bytes fails the Put.
//   - Get opens the named object for reading; the caller closes it. A
//     missing object is an error wrapping ErrNotFound. Implementations need
//     not verify content: callers check the SHA-256 the manifest records.
//   - Stat gives the object's size, or an error wrapping ErrNotFound.
//   - List returns every object whose name starts with prefix (a plain
//     string prefix, not only a directory), in any order; none is not an
//     error.
//   - Delete removes the object; deleting a missing object is not an error.
//
// All methods are safe for concurrent use and honour ctx. Errors name the
// object and the store. An S3-compatible store maps these one to one onto
// PutObject, GetObject, HeadObject, ListObjectsV2 and DeleteObject.
type Store interface {
	Put(ctx context.Context, name string, r io.Reader, size int64) error
	Get(ctx context.Context, name string) (io.ReadCloser, error)
	Stat(ctx context.Context, name string) (ObjectInfo, error)
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)
	Delete(ctx context.Context, name string) error
}

// digestStore is implemented by a Store that records each object's SHA-256
// at Put and verifies the content against it as it is read (JetStreamStore:
// nats.go's object store does both). Restore then checks only that the
// recorded digest is the manifest's, instead of hashing every byte again
// (hashing on the restore path slows every restore).
type digestStore interface {
	// GetSHA256 opens the named object for reading, as Get, once it checked
	// that the store recorded sum (hex SHA-256) for it; reading it to its
	// end fails when the content does not match.
	GetSHA256(ctx context.Context, name, sum string) (io.ReadCloser, error)
}

// validName checks an object name: non-empty, slash-separated elements
// without empty, "." or ".." elements, no leading or trailing slash, no
// backslash or NUL, at most 1024 bytes.
func validName(name string) error {
	if name == "" {
		return errors.New("snapshot: object name is empty")
	}
	if len(name) > 1024 {
		return fmt.Errorf("snapshot: object name %.40q... is longer than 1024 bytes", name)
	}
	if strings.ContainsAny(name, "\\\x00") {
		return fmt.Errorf("snapshot: object name %q contains a backslash or NUL", name)
	}
	for _, el := range strings.Split(name, "/") {
		if el == "" || el == "." || el == ".." {
			return fmt.Errorf("snapshot: object name %q has an empty, \".\" or \"..\" element", name)
		}
	}
	if path.Clean(name) != name {
		return fmt.Errorf("snapshot: object name %q is not a clean path", name)
	}
	return nil
}

// exactReader fails when the wrapped reader yields more or fewer than size
// bytes; it lets a Put refuse a short or long body.
type exactReader struct {
	r    io.Reader
	left int64
	name string
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left <= 0 {
		// Probe for extra bytes.
		var one [1]byte
		n, err := e.r.Read(one[:])
		if n > 0 {
			return 0, fmt.Errorf("snapshot: put %s: reader yields more than the declared size", e.name)
		}
		if err == nil {
			return 0, io.EOF
		}
		return 0, err
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if err == io.EOF && e.left > 0 {
		return n, fmt.Errorf("snapshot: put %s: reader ended %d bytes short of the declared size: %w", e.name, e.left, io.ErrUnexpectedEOF)
	}
	return n, err
}
