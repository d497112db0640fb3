package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// tmpPrefix marks a DirStore's in-progress writes; List skips them.
const tmpPrefix = ".tmp-"

// DirStore is a Store in a directory, e.g. on a filesystem every member
// mounts (NFS, a cluster filesystem). Object "a/b/c" is the file
// <root>/a/b/c. Put writes a temporary file in the same directory, syncs it
// and renames it into place, so readers never see a partial object.
type DirStore struct {
	root string
}

// NewDirStore returns a store rooted at dir, creating it if missing.
func NewDirStore(dir string) (*DirStore, error) {
	if dir == "" {
		return nil, errors.New("snapshot: directory store: no directory given")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("snapshot: directory store %s: %w", dir, err)
	}
	return &DirStore{root: dir}, nil
}

// Root is the store's directory.
func (d *DirStore) Root() string { return d.root }

func (d *DirStore) path(name string) (string, error) {
	if err := validName(name); err != nil {
		return "", err
	}
	for _, el := range strings.Split(name, "/") {
		if strings.HasPrefix(el, tmpPrefix) {
			return "", fmt.Errorf("snapshot: object name %q: element %q uses the reserved prefix %q", name, el, tmpPrefix)
		}
	}
	return filepath.Join(d.root, filepath.FromSlash(name)), nil
}

// Put implements Store.
func (d *DirStore) Put(ctx context.Context, name string, r io.Reader, size int64) (err error) {
	p, err := d.path(name)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("snapshot: put %s: %w", name, err)
	}
	dir := filepath.Dir(p)
	var f *os.File
	// A concurrent Delete may remove the (empty) directory between MkdirAll
	// and CreateTemp: retry a few times.
	for attempt := 0; ; attempt++ {
		if err = os.MkdirAll(dir, 0o755); err == nil {
			f, err = os.CreateTemp(dir, tmpPrefix+"*")
		}
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt >= 3 {
			return fmt.Errorf("snapshot: put %s in %s: %w", name, d.root, err)
		}
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err = io.Copy(f, &ctxReader{ctx: ctx, r: &exactReader{r: r, left: size, name: name}}); err != nil {
		return fmt.Errorf("snapshot: put %s in %s: %w", name, d.root, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("snapshot: put %s in %s: sync: %w", name, d.root, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("snapshot: put %s in %s: %w", name, d.root, err)
	}
	if err = os.Rename(f.Name(), p); err != nil {
		return fmt.Errorf("snapshot: put %s in %s: %w", name, d.root, err)
	}
	if df, derr := os.Open(dir); derr == nil {
		_ = df.Sync()
		_ = df.Close()
	}
	return nil
}

// Get implements Store.
func (d *DirStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	p, err := d.path(name)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("snapshot: get %s: %w", name, err)
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("snapshot: get %s in %s: %w", name, d.root, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: get %s in %s: %w", name, d.root, err)
	}
	return f, nil
}

// Stat implements Store.
func (d *DirStore) Stat(ctx context.Context, name string) (ObjectInfo, error) {
	p, err := d.path(name)
	if err != nil {
		return ObjectInfo{}, err
	}
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return ObjectInfo{}, fmt.Errorf("snapshot: stat %s in %s: %w", name, d.root, ErrNotFound)
	}
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("snapshot: stat %s in %s: %w", name, d.root, err)
	}
	if !fi.Mode().IsRegular() {
		return ObjectInfo{}, fmt.Errorf("snapshot: stat %s in %s: not a regular file", name, d.root)
	}
	return ObjectInfo{Name: name, Size: fi.Size()}, nil
}

// List implements Store.
func (d *DirStore) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	// Walk only the deepest directory the prefix names.
	start := d.root
	if i := strings.LastIndex(prefix, "/"); i > 0 {
		dir := prefix[:i]
		if err := validName(dir); err != nil {
			return nil, fmt.Errorf("snapshot: list prefix %q: %w", prefix, err)
		}
		start = filepath.Join(d.root, filepath.FromSlash(dir))
	}
	var out []ObjectInfo
	err := filepath.WalkDir(start, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if de.IsDir() || strings.HasPrefix(de.Name(), tmpPrefix) || !de.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if !strings.HasPrefix(name, prefix) {
			return nil
		}
		fi, err := de.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted meanwhile
		}
		if err != nil {
			return err
		}
		out = append(out, ObjectInfo{Name: name, Size: fi.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot: list %q in %s: %w", prefix, d.root, err)
	}
	return out, nil
}

// Delete implements Store.
func (d *DirStore) Delete(ctx context.Context, name string) error {
	p, err := d.path(name)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("snapshot: delete %s: %w", name, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("snapshot: delete %s in %s: %w", name, d.root, err)
	}
	// Drop directories left empty (best effort; a concurrent Put recreates them).
	for dir := filepath.Dir(p); dir != d.root && strings.HasPrefix(dir, d.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}

// ctxReader stops a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
