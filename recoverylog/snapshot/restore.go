package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"
)

// ErrNoSnapshot is wrapped by Restore when no usable snapshot exists.
var ErrNoSnapshot = errors.New("snapshot: no usable snapshot")

// RestoreConfig configures Restore.
type RestoreConfig struct {
	Store Store
	Shard string
	// Pointer is the shard's etcd pointer, if any: its manifest is tried
	// first, then older manifests (covering lower log ids), newest first.
	// Nil tries every manifest in the store, newest first.
	Pointer *Pointer
	// Dir is the database directory to restore into. It is replaced only
	// once a snapshot was fully downloaded and verified.
	Dir string
	// Options open the restored database read-only to check its Position;
	// nil means RocksDB defaults. Not destroyed.
	Options *grocksdb.Options
	// Logger receives structured logs with the field "shard".
	Logger hclog.Logger
}

// Restore downloads the newest usable snapshot of the shard into Dir. Each
// file's size and SHA-256 are verified against the manifest, and the
// restored database's Position against the manifest's; a missing or
// corrupt file, or an unreadable manifest, makes it fall back to the next
// older snapshot. It returns the manifest restored, or an error wrapping
// ErrNoSnapshot (with every candidate's failure) when none is usable; then
// Dir is left as it was.
func Restore(ctx context.Context, cfg RestoreConfig) (*Manifest, error) {
	start := time.Now()
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	logger = logger.With("shard", cfg.Shard)
	if cfg.Store == nil || cfg.Shard == "" || cfg.Dir == "" {
		return nil, errors.New("snapshot: restore needs a store, a shard and a directory")
	}
	tmp := filepath.Clean(cfg.Dir) + ".restoring"
	defer os.RemoveAll(tmp)
	// The pointer's manifest first; the store is listed only to fall back
	// (or when there is no pointer).
	var cands []manifestRef
	listed := false
	if p := cfg.Pointer; p != nil {
		cands = append(cands, manifestRef{ID: p.ID, Name: p.Manifest})
	}
	more := func() error {
		listed = true
		refs, err := listManifests(ctx, cfg.Store, cfg.Shard)
		if err != nil {
			return fmt.Errorf("snapshot: shard %s: restore: %w", cfg.Shard, err)
		}
		for _, r := range refs {
			if p := cfg.Pointer; p != nil && (r.Name == p.Manifest || uint64(r.Covers) > p.LogID) {
				continue
			}
			cands = append(cands, r)
		}
		return nil
	}
	var errs []error
	for i := 0; ; i++ {
		if i == len(cands) && !listed {
			if err := more(); err != nil {
				return nil, err
			}
		}
		if i == len(cands) {
			break
		}
		c := cands[i]
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("snapshot: shard %s: restore: %w", cfg.Shard, err)
		}
		m, err := restoreOne(ctx, cfg, c.Name, tmp)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("snapshot: shard %s: restore: %w", cfg.Shard, ctx.Err())
			}
			restoreFallbacks.WithLabelValues(cfg.Shard).Inc()
			logger.Warn("snapshot unusable; falling back to an older one", "manifest", c.Name, "error", err)
			errs = append(errs, err)
			continue
		}
		if err := os.RemoveAll(cfg.Dir); err != nil {
			return nil, fmt.Errorf("snapshot: shard %s: restore: clear %s: %w", cfg.Shard, cfg.Dir, err)
		}
		if err := os.Rename(tmp, cfg.Dir); err != nil {
			return nil, fmt.Errorf("snapshot: shard %s: restore: %w", cfg.Shard, err)
		}
		d := time.Since(start)
		restoreDuration.Observe(d.Seconds())
		logger.Info("snapshot restored", "id", m.ID, "log_id", m.LogID, "files", len(m.Files), "bytes", m.Size(), "took", d, "dir", cfg.Dir)
		return m, nil
	}
	if len(cands) == 0 {
		return nil, fmt.Errorf("%w: shard %s has no snapshot in the store", ErrNoSnapshot, cfg.Shard)
	}
	return nil, fmt.Errorf("%w: shard %s: all %d snapshots failed: %w", ErrNoSnapshot, cfg.Shard, len(cands), errors.Join(errs...))
}

// restoreOne downloads and verifies one snapshot into tmp.
func restoreOne(ctx context.Context, cfg RestoreConfig, name, tmp string) (*Manifest, error) {
	m, err := LoadManifest(ctx, cfg.Store, name)
	if err != nil {
		return nil, err
	}
	if m.Shard != cfg.Shard {
		return nil, fmt.Errorf("%w: %s belongs to shard %q", ErrBadManifest, name, m.Shard)
	}
	if err := os.RemoveAll(tmp); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	for _, f := range m.Files {
		if err := download(ctx, cfg.Store, f, filepath.Join(tmp, f.Name)); err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", m.ID, err)
		}
	}
	pos, err := readPosition(tmp, cfg.Options)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", m.ID, err)
	}
	if pos != m.Position.Recoverylog() {
		return nil, fmt.Errorf("snapshot %s: restored database is at %v, the manifest says %v", m.ID, pos, m.Position.Recoverylog())
	}
	return m, nil
}

// download copies one object to path, checking its size and SHA-256 (a
// digestStore checks the content itself as it is read to the end).
func download(ctx context.Context, st Store, f File, path string) error {
	var rc io.ReadCloser
	var err error
	var h hash.Hash
	if ds, ok := st.(digestStore); ok {
		rc, err = ds.GetSHA256(ctx, f.Object, f.SHA256)
	} else {
		rc, err = st.Get(ctx, f.Object)
		h = sha256.New()
	}
	if err != nil {
		return fmt.Errorf("file %s: %w", f.Name, err)
	}
	defer rc.Close()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("file %s: %w", f.Name, err)
	}
	var w io.Writer = out
	if h != nil {
		w = io.MultiWriter(out, h)
	}
	// Up to f.Size+1 bytes: a digestStore verifies at the end of the
	// object, which a copy of exactly f.Size bytes reaches.
	n, err := io.Copy(w, io.LimitReader(rc, f.Size+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("file %s from %s: %w", f.Name, f.Object, err)
	}
	if n != f.Size {
		return fmt.Errorf("file %s from %s: %d bytes, the manifest says %d", f.Name, f.Object, n, f.Size)
	}
	if h == nil {
		return nil
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != f.SHA256 {
		return fmt.Errorf("file %s from %s: sha256 %s, the manifest says %s (corrupt)", f.Name, f.Object, sum, f.SHA256)
	}
	return nil
}
