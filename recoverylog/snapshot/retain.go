package snapshot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// RetainResult describes one Retain.
type RetainResult struct {
	// Kept are the ids of the snapshots kept, newest first.
	Kept []string
	// TruncatedBefore is the log id the recovery log now starts at (0: not truncated).
	TruncatedBefore message.MessageID
	// DeletedManifests, DeletedFiles and DeletedBytes count removed objects.
	DeletedManifests, DeletedFiles int
	DeletedBytes                   int64
}

// Retain keeps the newest Kept snapshots that the pointer ptr reaches
// (manifests covering a log id ≤ ptr.LogID, ptr's own first), truncates
// log before the oldest of them (everything before its covered id + 1
// goes), and deletes from the store the older manifests, their non-SST
// files, and every SST no remaining manifest names. It never truncates
// past a kept snapshot and never deletes an object a remaining manifest
// names; manifests newer than ptr (an aborted snapshot, or one in progress
// elsewhere) are left alone. log may be nil (no truncation). Take calls it
// after every snapshot.
func (s *Snapshotter) Retain(ctx context.Context, ptr Pointer, log wal.WAL) (RetainResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retain(ctx, ptr, log)
}

func (s *Snapshotter) retain(ctx context.Context, ptr Pointer, log wal.WAL) (RetainResult, error) {
	shard, st := s.cfg.Shard, s.cfg.Store
	var res RetainResult
	refs, err := listManifests(ctx, st, shard)
	if err != nil {
		return res, fmt.Errorf("snapshot: shard %s: retain: %w", shard, err)
	}
	var eligible, newer []manifestRef
	var own *manifestRef
	for i := range refs {
		r := refs[i]
		switch {
		case r.Name == ptr.Manifest:
			own = &refs[i]
		case uint64(r.Covers) <= ptr.LogID:
			eligible = append(eligible, r)
		default:
			newer = append(newer, r)
		}
	}
	if own == nil {
		return res, fmt.Errorf("snapshot: shard %s: retain: the pointer's manifest %s is not in the store", shard, ptr.Manifest)
	}
	eligible = append([]manifestRef{*own}, eligible...)
	kept := eligible[:min(s.cfg.Kept, len(eligible))]
	drop := eligible[len(kept):]
	oldest := kept[0].Covers
	keptIDs := map[string]bool{}
	for _, k := range kept {
		res.Kept = append(res.Kept, k.ID)
		keptIDs[k.ID] = true
		oldest = min(oldest, k.Covers)
	}

	// Truncate the log before the oldest kept snapshot's first needed record.
	if log != nil && oldest > 0 {
		first := firstID(ctx, log)
		cut := oldest + 1
		err := log.Truncate(ctx, cut)
		switch {
		case errors.Is(err, errors.ErrUnsupported):
			// The log cannot be truncated (an older server): it keeps
			// growing, but a restore still replays only what follows the
			// snapshot. Said once per snapshotter.
			if !s.noTruncateWarned {
				s.logger.Warn("the recovery log cannot be truncated; it keeps growing (snapshots still bound recovery)", "error", err)
				s.noTruncateWarned = true
			}
			cut = 0
		case err != nil:
			return res, fmt.Errorf("snapshot: shard %s: truncate recovery log before %d: %w", shard, cut, err)
		}
		res.TruncatedBefore = cut
		if cut > 0 && first > 0 && cut > first {
			truncatedMessages.WithLabelValues(shard).Add(float64(cut - first))
		}
		s.logger.Debug("recovery log truncated", "before", cut, "oldest_kept", kept[len(kept)-1].ID)
	}
	if err := s.hook(StepTruncate); err != nil {
		return res, err
	}

	// Drop older manifests, then their non-SST files.
	for _, d := range drop {
		if err := st.Delete(ctx, d.Name); err != nil {
			return res, fmt.Errorf("snapshot: shard %s: delete manifest: %w", shard, err)
		}
		res.DeletedManifests++
	}
	remaining := map[string]bool{}
	for _, k := range kept {
		remaining[k.ID] = true
	}
	for _, n := range newer {
		remaining[n.ID] = true
	}
	fileObjs, err := st.List(ctx, shard+"/files/")
	if err != nil {
		return res, fmt.Errorf("snapshot: shard %s: list files: %w", shard, err)
	}
	for _, o := range fileObjs {
		rest := strings.TrimPrefix(o.Name, shard+"/files/")
		id, _, _ := strings.Cut(rest, "/")
		if remaining[id] {
			continue
		}
		covers, err := parseID(id)
		if err != nil || covers > oldest {
			continue // not ours, or possibly a snapshot in progress elsewhere
		}
		if err := st.Delete(ctx, o.Name); err != nil {
			return res, fmt.Errorf("snapshot: shard %s: %w", shard, err)
		}
		res.DeletedFiles++
		res.DeletedBytes += o.Size
	}

	// SSTs named by no remaining manifest. If any remaining manifest cannot
	// be read, its files are unknown: keep every SST this round.
	named := map[string]bool{}
	for id := range remaining {
		m, err := LoadManifest(ctx, st, ManifestName(shard, id))
		if err != nil {
			s.logger.Warn("cannot read a retained manifest; skipping SST collection", "manifest", ManifestName(shard, id), "error", err)
			return res, nil
		}
		for _, f := range m.Files {
			named[f.Object] = true
		}
	}
	ssts, err := st.List(ctx, sstPrefix(shard))
	if err != nil {
		return res, fmt.Errorf("snapshot: shard %s: list SSTs: %w", shard, err)
	}
	for _, o := range ssts {
		if named[o.Name] {
			continue
		}
		if err := st.Delete(ctx, o.Name); err != nil {
			return res, fmt.Errorf("snapshot: shard %s: %w", shard, err)
		}
		res.DeletedFiles++
		res.DeletedBytes += o.Size
	}
	if res.DeletedManifests > 0 || res.DeletedFiles > 0 {
		s.logger.Debug("snapshots collected", "manifests", res.DeletedManifests, "files", res.DeletedFiles, "bytes", res.DeletedBytes)
	}
	return res, nil
}

// firstID is the id of the first message the log retains, or 0 if unknown.
func firstID(ctx context.Context, log wal.WAL) message.MessageID {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	last, err := log.LastID(ctx)
	if err != nil || last == 0 {
		return 0
	}
	sc, err := log.Read(ctx, wal.ReadOption{Name: "snapshot-retain", DeliverPolicy: wal.DeliverAll()})
	if err != nil {
		return 0
	}
	defer sc.Close()
	select {
	case m, ok := <-sc.Chan():
		if ok {
			return m.ID
		}
	case <-ctx.Done():
	}
	return 0
}
