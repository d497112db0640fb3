package snapshot

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// DefaultKept is the number of snapshots kept when Config.Kept is zero.
const DefaultKept = 2

// ErrEmpty is returned by Take when the database has applied no record yet.
var ErrEmpty = errors.New("snapshot: nothing to snapshot (the database applied no record yet)")

// Step names a point of Take, for Config.Hook (fault injection in tests).
type Step string

// The steps of Take, in order.
const (
	// StepCheckpoint: the checkpoint exists and its Position was read.
	StepCheckpoint Step = "checkpoint"
	// StepUpload: one more file is in the store (reported per file).
	StepUpload Step = "upload"
	// StepManifest: the manifest is in the store.
	StepManifest Step = "manifest"
	// StepRecord: the Snapshot record is committed to the recovery log.
	StepRecord Step = "record"
	// StepPointer: the etcd pointer names the new manifest.
	StepPointer Step = "pointer"
	// StepTruncate: the recovery log was truncated (before garbage collection).
	StepTruncate Step = "truncate"
)

// Config configures a Snapshotter of one shard.
type Config struct {
	// Shard is the shard id; it prefixes every object of the shard.
	Shard string
	// Store holds snapshot objects.
	Store Store
	// Etcd and Prefix locate the pointer <Prefix>/snapshots/<Shard>.
	Etcd   *clientv3.Client
	Prefix string
	// ScratchDir holds checkpoints while they are uploaded. It must be on
	// the database's filesystem (checkpoints hard-link SST files). Stale
	// checkpoints left by a crash are removed by NewSnapshotter.
	ScratchDir string
	// Kept is how many snapshots are retained (zero: DefaultKept). The
	// recovery log is truncated before the oldest one kept.
	Kept int
	// Options open a checkpoint read-only to read its Position; they must
	// be compatible with the database's (comparator, merge operator). Nil
	// means RocksDB defaults. Not destroyed by the Snapshotter.
	Options *grocksdb.Options
	// CompactAbove: Take compacts the database's whole key range before its
	// checkpoint when the checkpoint would hold more than CompactAbove times
	// the live data (and at least 16 MiB of dead data), so a restore moves
	// live data rather than overwritten versions. The live data is RocksDB's
	// estimate, which a growing state fools: a compaction that finds little
	// dead starts a cool-down (see compact.go). Zero means
	// DefaultCompactAbove; negative, never.
	CompactAbove float64
	// Logger receives structured logs with the field "shard".
	Logger hclog.Logger
	// Hook, when set, is called at each Step; an error aborts Take at that
	// point as a crash would (nothing is cleaned up in the store). Tests use
	// it for fault injection.
	Hook func(step Step) error
}

// Committer appends a Snapshot record to the recovery log in order with
// the transactions, and tells how many bytes of log the writer applied
// (the compaction policy's clock): *recoverylog.Recorder implements it.
type Committer interface {
	CommitSnapshot(ctx context.Context, manifest string, covers message.MessageID) *recoverylog.Commit
	AppliedBytes() int64
}

// Source is what Take snapshots: the shard's live database, written by a
// primary whose Recorder appends the Snapshot record and whose recovery log
// is truncated afterwards.
type Source struct {
	// DB is the shard database (RocksDB's WAL disabled: the checkpoint
	// flushes the memtable).
	DB *grocksdb.DB
	// Recorder appends the Snapshot record.
	Recorder Committer
	// Log is the shard's recovery log, truncated after the pointer moved.
	Log wal.WAL
	// Term is the primary's fencing term, recorded in the manifest.
	Term uint64
	// Guard is the primary's slot-0 assignment key and CreateRevision: the
	// pointer moves only while it still exists (see PublishPointer).
	Guard Guard
}

// Result describes one snapshot taken.
type Result struct {
	Manifest *Manifest
	// UploadedBytes counts bytes written to the store (files and manifest);
	// ReusedBytes the SST bytes the store already held.
	UploadedBytes, ReusedBytes int64
	UploadedFiles, ReusedFiles int
	// SSTBytes is the total size of the snapshot's SST files.
	SSTBytes int64
	// Compacted tells that Take compacted the database first (see
	// Config.CompactAbove), taking CompactDuration.
	Compacted       bool
	CompactDuration time.Duration
	Retain          RetainResult
	Duration        time.Duration
}

// fileKey identifies a checkpoint file whose hash is cached: SST files are
// immutable and their numbers are never reused within a database.
type fileKey struct {
	name  string
	size  int64
	mtime int64
}

// Snapshotter takes snapshots of one shard, one at a time, and retains the
// newest Kept of them. It caches SST hashes between snapshots.
type Snapshotter struct {
	cfg    Config
	logger hclog.Logger

	mu   sync.Mutex // one Take or Retain at a time
	sums map[fileKey]string
	// compact decides on compactions before checkpoints (nil: never).
	compact *compactPolicy
	// noTruncateWarned: the log's backend cannot truncate, already said.
	noTruncateWarned bool
}

// NewSnapshotter checks cfg and clears stale checkpoints from ScratchDir.
func NewSnapshotter(cfg Config) (*Snapshotter, error) {
	if cfg.Shard == "" || strings.ContainsAny(cfg.Shard, "/\\") {
		return nil, fmt.Errorf("snapshot: shard id %q is empty or contains a slash", cfg.Shard)
	}
	if cfg.Store == nil {
		return nil, fmt.Errorf("snapshot: shard %s: no store", cfg.Shard)
	}
	if cfg.Etcd == nil {
		return nil, fmt.Errorf("snapshot: shard %s: no etcd client (the pointer lives in etcd)", cfg.Shard)
	}
	if cfg.ScratchDir == "" {
		return nil, fmt.Errorf("snapshot: shard %s: no scratch directory", cfg.Shard)
	}
	if cfg.Kept <= 0 {
		cfg.Kept = DefaultKept
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if err := os.RemoveAll(cfg.ScratchDir); err != nil {
		return nil, fmt.Errorf("snapshot: shard %s: clear scratch directory: %w", cfg.Shard, err)
	}
	if err := os.MkdirAll(cfg.ScratchDir, 0o755); err != nil {
		return nil, fmt.Errorf("snapshot: shard %s: scratch directory: %w", cfg.Shard, err)
	}
	s := &Snapshotter{cfg: cfg, logger: cfg.Logger.With("shard", cfg.Shard), sums: map[fileKey]string{}}
	switch {
	case cfg.CompactAbove == 0:
		s.compact = newCompactPolicy(DefaultCompactAbove)
	case cfg.CompactAbove > 1:
		s.compact = newCompactPolicy(cfg.CompactAbove)
	case cfg.CompactAbove > 0:
		return nil, fmt.Errorf("snapshot: shard %s: CompactAbove %g: want more than 1 (or 0 for the default, negative for never)", cfg.Shard, cfg.CompactAbove)
	}
	return s, nil
}

func (s *Snapshotter) hook(step Step) error {
	if s.cfg.Hook == nil {
		return nil
	}
	if err := s.cfg.Hook(step); err != nil {
		return fmt.Errorf("snapshot: shard %s: at step %s: %w", s.cfg.Shard, step, err)
	}
	return nil
}

// Take snapshots src.DB: a compaction first when the database holds much
// more than its live data (Config.CompactAbove), a RocksDB checkpoint
// (flushing the memtable; the database keeps serving writes), its Position read from the checkpoint
// itself, every SST the store lacks uploaded under its SHA-256, every
// non-SST file (MANIFEST, CURRENT, OPTIONS, WAL) uploaded under the
// snapshot's id, then the manifest; then a Snapshot record through
// src.Recorder, the etcd pointer (guarded by src.Guard), and Retain.
//
// A failure or crash at any point leaves the previous pointer, and so the
// previous snapshot, in place: objects are written before the manifest
// naming them, the manifest before the record and the pointer, and the log
// is truncated and old objects deleted only after the pointer moved.
// Objects of an aborted snapshot are collected by a later Retain. Take
// returns ErrEmpty for a database that applied nothing yet.
func (s *Snapshotter) Take(ctx context.Context, src Source) (res *Result, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	shard := s.cfg.Shard
	defer func() {
		if err != nil && !errors.Is(err, ErrEmpty) {
			snapshotFailures.WithLabelValues(shard).Inc()
		}
	}()

	comp, err := s.compactIfDue(ctx, src)
	if err != nil {
		return nil, err
	}
	if comp.ran {
		snapshotCompactions.WithLabelValues(shard).Inc()
		s.logger.Info("compacted before the snapshot", "bytes_before", comp.before, "bytes_after", comp.after, "took", comp.took)
	}
	dir := filepath.Join(s.cfg.ScratchDir, "ckpt-"+randHex())
	defer os.RemoveAll(dir)
	files, pos, err := s.checkpoint(src.DB, dir)
	if err != nil {
		return nil, err
	}
	if err := s.hook(StepCheckpoint); err != nil {
		return nil, err
	}

	id := newID(pos.LogID, src.Term)
	m := &Manifest{
		Version: manifestVersion, Shard: shard, ID: id, Term: src.Term,
		LogID: uint64(pos.LogID), Position: fromPosition(pos), Created: time.Now().UTC(),
	}
	res = &Result{Manifest: m, Compacted: comp.ran, CompactDuration: comp.took}
	if err := s.uploadFiles(ctx, dir, files, m, res); err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("snapshot: shard %s: checkpoint %s: %w", shard, dir, err)
	}
	if err := s.verifyObjects(ctx, m); err != nil {
		return nil, err
	}
	if err := s.writeManifest(ctx, m, res); err != nil {
		return nil, err
	}
	ptr, err := s.commit(ctx, src, m, pos)
	if err != nil {
		return nil, err
	}
	s.logger.Info("snapshot taken", "id", id, "log_id", m.LogID, "files", len(m.Files),
		"uploaded_bytes", res.UploadedBytes, "reused_bytes", res.ReusedBytes)

	rr, err := s.retain(ctx, ptr, src.Log)
	res.Retain = rr
	if err != nil {
		return res, err
	}
	res.Duration = time.Since(start)
	snapshotDuration.Observe(res.Duration.Seconds())
	return res, nil
}

// uploadFiles uploads the checkpoint's files (names in dir) for the
// snapshot m, adding each to m.Files and counting it in res as uploaded or
// reused (an SST the store holds already). It calls the StepUpload hook
// after each file.
func (s *Snapshotter) uploadFiles(ctx context.Context, dir string, files []string, m *Manifest, res *Result) error {
	shard := s.cfg.Shard
	for _, name := range files {
		f, uploaded, err := s.uploadFile(ctx, dir, name, m.ID)
		if err != nil {
			return err
		}
		m.Files = append(m.Files, f)
		if strings.HasSuffix(name, ".sst") {
			res.SSTBytes += f.Size
		}
		if uploaded {
			res.UploadedBytes += f.Size
			res.UploadedFiles++
			snapshotUploadedBytes.WithLabelValues(shard).Add(float64(f.Size))
		} else {
			res.ReusedBytes += f.Size
			res.ReusedFiles++
			snapshotReusedFiles.WithLabelValues(shard).Inc()
		}
		if err := s.hook(StepUpload); err != nil {
			return err
		}
	}
	return nil
}

// verifyObjects checks that every object m names is in the store with its
// size: a concurrent Retain of a deposed primary could have collected an
// SST uploadFile found present.
func (s *Snapshotter) verifyObjects(ctx context.Context, m *Manifest) error {
	shard := s.cfg.Shard
	for _, f := range m.Files {
		oi, err := s.cfg.Store.Stat(ctx, f.Object)
		if err != nil {
			return fmt.Errorf("snapshot: shard %s: verify %s: %w", shard, f.Object, err)
		}
		if oi.Size != f.Size {
			return fmt.Errorf("snapshot: shard %s: verify %s: %d bytes in the store, want %d", shard, f.Object, oi.Size, f.Size)
		}
	}
	return nil
}

// writeManifest stores m, counts its bytes in res as uploaded, and calls
// the StepManifest hook.
func (s *Snapshotter) writeManifest(ctx context.Context, m *Manifest, res *Result) error {
	shard := s.cfg.Shard
	enc := m.Encode()
	if err := s.cfg.Store.Put(ctx, m.Name(), strings.NewReader(string(enc)), int64(len(enc))); err != nil {
		return fmt.Errorf("snapshot: shard %s: write manifest: %w", shard, err)
	}
	res.UploadedBytes += int64(len(enc))
	snapshotUploadedBytes.WithLabelValues(shard).Add(float64(len(enc)))
	return s.hook(StepManifest)
}

// commit makes the stored snapshot m (of position pos) the shard's: a
// Snapshot record through src.Recorder, then the etcd pointer (guarded by
// src.Guard), each followed by its hook. It returns the pointer.
func (s *Snapshotter) commit(ctx context.Context, src Source, m *Manifest, pos recoverylog.Position) (Pointer, error) {
	shard := s.cfg.Shard
	if err := src.Recorder.CommitSnapshot(ctx, m.Name(), pos.LogID).Wait(ctx); err != nil {
		return Pointer{}, fmt.Errorf("snapshot: shard %s: append snapshot record for %s: %w", shard, m.ID, err)
	}
	if err := s.hook(StepRecord); err != nil {
		return Pointer{}, err
	}
	ptr := PointerOf(m)
	if err := PublishPointer(ctx, s.cfg.Etcd, s.cfg.Prefix, shard, ptr, src.Guard); err != nil {
		return Pointer{}, fmt.Errorf("snapshot: shard %s: %w", shard, err)
	}
	if err := s.hook(StepPointer); err != nil {
		return Pointer{}, err
	}
	return ptr, nil
}

// checkpoint creates a checkpoint of db in dir and returns its files (sorted)
// and the Position stored in it.
func (s *Snapshotter) checkpoint(db *grocksdb.DB, dir string) ([]string, recoverylog.Position, error) {
	shard := s.cfg.Shard
	cp, err := db.NewCheckpoint()
	if err != nil {
		return nil, recoverylog.Position{}, fmt.Errorf("snapshot: shard %s: new checkpoint: %w", shard, err)
	}
	// logSizeForFlush 0: always flush the memtable first. The shard DB
	// writes without RocksDB's WAL, so unflushed writes would be missing.
	err = cp.CreateCheckpoint(dir, 0)
	cp.Destroy()
	if err != nil {
		return nil, recoverylog.Position{}, fmt.Errorf("snapshot: shard %s: create checkpoint in %s: %w", shard, dir, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, recoverylog.Position{}, fmt.Errorf("snapshot: shard %s: read checkpoint %s: %w", shard, dir, err)
	}
	var files []string
	for _, e := range ents {
		if e.Type().IsRegular() {
			files = append(files, e.Name())
		}
	}
	sort.Strings(files)
	pos, err := readPosition(dir, s.cfg.Options)
	if err != nil {
		return nil, recoverylog.Position{}, fmt.Errorf("snapshot: shard %s: %w", shard, err)
	}
	if pos.Seq == 0 {
		return nil, recoverylog.Position{}, ErrEmpty
	}
	return files, pos, nil
}

// readPosition opens the database at dir read-only and reads its Position.
func readPosition(dir string, opts *grocksdb.Options) (recoverylog.Position, error) {
	o := opts
	if o == nil {
		o = grocksdb.NewDefaultOptions()
		defer o.Destroy()
	}
	db, err := grocksdb.OpenDbForReadOnly(o, dir, false)
	if err != nil {
		return recoverylog.Position{}, fmt.Errorf("open %s read-only: %w", dir, err)
	}
	defer db.Close()
	pos, err := recoverylog.LoadPosition(db)
	if err != nil {
		return recoverylog.Position{}, fmt.Errorf("position of %s: %w", dir, err)
	}
	return pos, nil
}

// uploadFile hashes a checkpoint file and uploads it unless it is an SST
// the store already holds. It reports whether it uploaded.
func (s *Snapshotter) uploadFile(ctx context.Context, dir, name, id string) (File, bool, error) {
	shard := s.cfg.Shard
	p := filepath.Join(dir, name)
	fi, err := os.Stat(p)
	if err != nil {
		return File{}, false, fmt.Errorf("snapshot: shard %s: %w", shard, err)
	}
	isSST := strings.HasSuffix(name, ".sst")
	key := fileKey{name: name, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	sum, cached := "", false
	if isSST {
		sum, cached = s.sums[key]
	}
	if !cached {
		if sum, err = hashFile(p); err != nil {
			return File{}, false, fmt.Errorf("snapshot: shard %s: %w", shard, err)
		}
		if isSST {
			s.sums[key] = sum
		}
	}
	f := File{Name: name, Size: fi.Size(), SHA256: sum}
	if isSST {
		f.Object = sstObject(shard, sum)
		oi, err := s.cfg.Store.Stat(ctx, f.Object)
		if err == nil && oi.Size == f.Size {
			return f, false, nil
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			return File{}, false, fmt.Errorf("snapshot: shard %s: %w", shard, err)
		}
	} else {
		f.Object = FilesPrefix(shard, id) + name
	}
	fh, err := os.Open(p)
	if err != nil {
		return File{}, false, fmt.Errorf("snapshot: shard %s: %w", shard, err)
	}
	defer fh.Close()
	if err := s.cfg.Store.Put(ctx, f.Object, fh, f.Size); err != nil {
		return File{}, false, fmt.Errorf("snapshot: shard %s: upload %s: %w", shard, name, err)
	}
	return f, true, nil
}

func hashFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func randHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
