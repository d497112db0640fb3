package snapshot

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/wal/message"
)

// manifestVersion is the manifest format this package writes.
const manifestVersion = 1

// ErrBadManifest is wrapped when a manifest cannot be decoded or is
// inconsistent.
var ErrBadManifest = errors.New("snapshot: bad manifest")

// Object layout in a Store, per shard:
//
//	<shard>/manifests/<id>.json      one manifest per snapshot
//	<shard>/sst/<sha256>.sst         SST files, by content (shared by snapshots)
//	<shard>/files/<id>/<name>        a snapshot's non-SST files (MANIFEST-*, CURRENT, OPTIONS-*, *.log)
//
// A snapshot id is "<log id covered, 20 digits>-<term, 20 digits>-<8 hex random>",
// so ids sort by the log position they cover.

// manifestsPrefix is the prefix of a shard's manifest objects.
func manifestsPrefix(shard string) string { return shard + "/manifests/" }

// ManifestName is the object name of snapshot id's manifest.
func ManifestName(shard, id string) string { return manifestsPrefix(shard) + id + ".json" }

// sstPrefix is the prefix of a shard's SST objects.
func sstPrefix(shard string) string { return shard + "/sst/" }

// sstObject is the object name of an SST file with the given SHA-256 (hex).
func sstObject(shard, sum string) string { return sstPrefix(shard) + sum + ".sst" }

// FilesPrefix is the prefix of snapshot id's non-SST files.
func FilesPrefix(shard, id string) string { return shard + "/files/" + id + "/" }

// newID returns a fresh snapshot id for a snapshot covering logID under term.
func newID(logID message.MessageID, term uint64) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return fmt.Sprintf("%020d-%020d-%s", uint64(logID), term, hex.EncodeToString(r[:]))
}

// parseID returns the log id a snapshot id covers.
func parseID(id string) (message.MessageID, error) {
	parts := strings.Split(id, "-")
	if len(parts) != 3 || len(parts[0]) != 20 || len(parts[1]) != 20 || len(parts[2]) != 8 {
		return 0, fmt.Errorf("%w: snapshot id %q is not <20 digits>-<20 digits>-<8 hex>", ErrBadManifest, id)
	}
	n, err := strconv.ParseUint(parts[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: snapshot id %q: %v", ErrBadManifest, id, err)
	}
	return message.MessageID(n), nil
}

// idFromManifestName extracts the id of a manifest object name, or "".
func idFromManifestName(shard, name string) string {
	rest, ok := strings.CutPrefix(name, manifestsPrefix(shard))
	if !ok {
		return ""
	}
	id, ok := strings.CutSuffix(rest, ".json")
	if !ok || strings.Contains(id, "/") {
		return ""
	}
	if _, err := parseID(id); err != nil {
		return ""
	}
	return id
}

// File is one file of a checkpoint as the manifest records it.
type File struct {
	// Name is the file's name in the checkpoint directory (e.g. "000012.sst").
	Name string `json:"name"`
	// Object is the Store object holding its bytes.
	Object string `json:"object"`
	// Size is its length in bytes.
	Size int64 `json:"size"`
	// SHA256 is the hex SHA-256 of its bytes, verified on restore.
	SHA256 string `json:"sha256"`
}

// Position is a recoverylog.Position in JSON.
type Position struct {
	Seq      uint64 `json:"seq"`
	Checksum uint32 `json:"checksum"`
	LogID    uint64 `json:"log_id"`
	Term     uint64 `json:"term"`
}

// fromPosition converts a recoverylog.Position.
func fromPosition(p recoverylog.Position) Position {
	return Position{Seq: p.Seq, Checksum: p.Checksum, LogID: uint64(p.LogID), Term: p.Term}
}

// Recoverylog converts back.
func (p Position) Recoverylog() recoverylog.Position {
	return recoverylog.Position{Seq: p.Seq, Checksum: p.Checksum, LogID: message.MessageID(p.LogID), Term: p.Term}
}

// Manifest describes one snapshot: a RocksDB checkpoint of a shard taken
// at a known recovery-log Position.
type Manifest struct {
	Version int    `json:"version"`
	Shard   string `json:"shard"`
	ID      string `json:"id"`
	// Term is the fencing term of the primary that took the snapshot.
	Term uint64 `json:"term"`
	// LogID is the recovery-log id the snapshot covers (Position.LogID):
	// replay after a restore starts after it.
	LogID uint64 `json:"log_id"`
	// Position is the applied Position stored in the checkpoint.
	Position Position  `json:"position"`
	Created  time.Time `json:"created"`
	// Files are every file of the checkpoint directory, sorted by name.
	Files []File `json:"files"`
}

// Name is the manifest's object name.
func (m *Manifest) Name() string { return ManifestName(m.Shard, m.ID) }

// Size is the total size of the snapshot's files.
func (m *Manifest) Size() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// Validate checks the manifest's consistency and names the bad field.
func (m *Manifest) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %s: %s", ErrBadManifest, m.ID, fmt.Sprintf(format, args...))
	}
	if m.Version != manifestVersion {
		return bad("version %d, want %d", m.Version, manifestVersion)
	}
	if m.Shard == "" || strings.ContainsAny(m.Shard, "/\\") {
		return bad("shard %q is empty or contains a slash", m.Shard)
	}
	covers, err := parseID(m.ID)
	if err != nil {
		return err
	}
	if uint64(covers) != m.LogID || m.Position.LogID != m.LogID {
		return bad("log_id %d, position.log_id %d and the id's %d disagree", m.LogID, m.Position.LogID, covers)
	}
	if m.Position.Seq == 0 {
		return bad("position.seq is 0 (an empty database)")
	}
	seen := map[string]bool{}
	current, manifest := false, false
	for i, f := range m.Files {
		if f.Name == "" || f.Name == "." || f.Name == ".." || strings.ContainsAny(f.Name, "/\\\x00") {
			return bad("files[%d].name %q is not a plain file name", i, f.Name)
		}
		if seen[f.Name] {
			return bad("files[%d].name %q repeats", i, f.Name)
		}
		seen[f.Name] = true
		if err := validName(f.Object); err != nil || !strings.HasPrefix(f.Object, m.Shard+"/") {
			return bad("files[%d].object %q is not an object of shard %s", i, f.Object, m.Shard)
		}
		if f.Size < 0 {
			return bad("files[%d].size %d is negative", i, f.Size)
		}
		if b, err := hex.DecodeString(f.SHA256); err != nil || len(b) != 32 {
			return bad("files[%d].sha256 %q is not 64 hex digits", i, f.SHA256)
		}
		current = current || f.Name == "CURRENT"
		manifest = manifest || strings.HasPrefix(f.Name, "MANIFEST-")
	}
	if !current || !manifest {
		return bad("files lack CURRENT or a MANIFEST-* file")
	}
	return nil
}

// Encode renders the manifest as indented JSON.
func (m *Manifest) Encode() []byte {
	b, _ := json.MarshalIndent(m, "", "  ")
	return append(b, '\n')
}

// DecodeManifest parses and validates a manifest.
func DecodeManifest(b []byte) (*Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Name < m.Files[j].Name })
	return &m, nil
}

// maxManifestSize bounds a manifest read from a store.
const maxManifestSize = 64 << 20

// LoadManifest reads and validates a manifest object.
func LoadManifest(ctx context.Context, st Store, name string) (*Manifest, error) {
	rc, err := st.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("snapshot: read manifest %s: %w", name, err)
	}
	if len(b) > maxManifestSize {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrBadManifest, name, maxManifestSize)
	}
	m, err := DecodeManifest(b)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", name, err)
	}
	if m.Name() != name {
		return nil, fmt.Errorf("%w: %s names itself %s", ErrBadManifest, name, m.Name())
	}
	return m, nil
}

// manifestRef is a manifest object found by listing.
type manifestRef struct {
	ID     string
	Name   string
	Covers message.MessageID
}

// listManifests lists a shard's manifests, newest (highest covered log
// id, then id) first. Objects whose names do not parse are ignored.
func listManifests(ctx context.Context, st Store, shard string) ([]manifestRef, error) {
	objs, err := st.List(ctx, manifestsPrefix(shard))
	if err != nil {
		return nil, err
	}
	var out []manifestRef
	for _, o := range objs {
		id := idFromManifestName(shard, o.Name)
		if id == "" {
			continue
		}
		c, _ := parseID(id)
		out = append(out, manifestRef{ID: id, Name: o.Name, Covers: c})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Covers != out[j].Covers {
			return out[i].Covers > out[j].Covers
		}
		return out[i].ID > out[j].ID
	})
	return out, nil
}
