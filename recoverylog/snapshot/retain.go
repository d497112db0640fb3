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

// retain is Retain with s.mu held.
func (s *Snapshotter) retain(ctx context.Context, ptr Pointer, log wal.WAL) (RetainResult, error) {
	var res RetainResult
	plan, err := s.planRetention(ctx, ptr)
	if err != nil {
		return res, err
	}
	for _, k := range plan.kept {
		res.Kept = append(res.Kept, k.ID)
	}
	if log != nil && plan.oldest > 0 {
		if res.TruncatedBefore, err = s.truncateLog(ctx, log, plan); err != nil {
			return res, err
		}
	}
	if err := s.hook(StepTruncate); err != nil {
		return res, err
	}
	if err := s.deleteManifests(ctx, plan.drop, &res); err != nil {
		return res, err
	}
	if err := s.deleteSnapshotFiles(ctx, plan, &res); err != nil {
		return res, err
	}
	if err := s.collectSSTs(ctx, plan.remaining(), &res); err != nil {
		return res, err
	}
	if res.DeletedManifests > 0 || res.DeletedFiles > 0 {
		s.logger.Debug("snapshots collected", "manifests", res.DeletedManifests, "files", res.DeletedFiles, "bytes", res.DeletedBytes)
	}
	return res, nil
}

// retentionPlan is what one retain keeps and drops of a shard's manifests.
type retentionPlan struct {
	// kept are the pointer's manifest then the newest older ones, at most
	// Config.Kept; drop are the older manifests the pointer reaches.
	kept, drop []manifestRef
	// newer are the manifests the pointer does not reach (covering a later
	// log id): an aborted snapshot or one in progress elsewhere.
	newer []manifestRef
	// oldest is the lowest log id a kept manifest covers.
	oldest message.MessageID
}

// remaining is the ids of the manifests retain leaves in the store.
func (p retentionPlan) remaining() map[string]bool {
	ids := map[string]bool{}
	for _, k := range p.kept {
		ids[k.ID] = true
	}
	for _, n := range p.newer {
		ids[n.ID] = true
	}
	return ids
}

// planRetention lists the shard's manifests and sorts them into kept,
// dropped and newer for ptr. ptr's own manifest must be in the store.
func (s *Snapshotter) planRetention(ctx context.Context, ptr Pointer) (retentionPlan, error) {
	shard := s.cfg.Shard
	refs, err := listManifests(ctx, s.cfg.Store, shard)
	if err != nil {
		return retentionPlan{}, fmt.Errorf("snapshot: shard %s: retain: %w", shard, err)
	}
	var plan retentionPlan
	var eligible []manifestRef
	var own *manifestRef
	for i := range refs {
		r := refs[i]
		switch {
		case r.Name == ptr.Manifest:
			own = &refs[i]
		case uint64(r.Covers) <= ptr.LogID:
			eligible = append(eligible, r)
		default:
			plan.newer = append(plan.newer, r)
		}
	}
	if own == nil {
		return retentionPlan{}, fmt.Errorf("snapshot: shard %s: retain: the pointer's manifest %s is not in the store", shard, ptr.Manifest)
	}
	eligible = append([]manifestRef{*own}, eligible...)
	plan.kept = eligible[:min(s.cfg.Kept, len(eligible))]
	plan.drop = eligible[len(plan.kept):]
	plan.oldest = plan.kept[0].Covers
	for _, k := range plan.kept {
		plan.oldest = min(plan.oldest, k.Covers)
	}
	return plan, nil
}

// truncateLog truncates log before the oldest kept snapshot's first needed
// record (plan.oldest + 1) and returns the id the log now starts at, or 0
// when the log cannot be truncated (errors.ErrUnsupported: warned once per
// snapshotter, not an error).
func (s *Snapshotter) truncateLog(ctx context.Context, log wal.WAL, plan retentionPlan) (message.MessageID, error) {
	shard := s.cfg.Shard
	first := firstID(ctx, log)
	cut := plan.oldest + 1
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
		return 0, fmt.Errorf("snapshot: shard %s: truncate recovery log before %d: %w", shard, cut, err)
	}
	if cut > 0 && first > 0 && cut > first {
		truncatedMessages.WithLabelValues(shard).Add(float64(cut - first))
	}
	s.logger.Debug("recovery log truncated", "before", cut, "oldest_kept", plan.kept[len(plan.kept)-1].ID)
	return cut, nil
}

// deleteManifests deletes the manifests drop from the store, counting them
// in res.
func (s *Snapshotter) deleteManifests(ctx context.Context, drop []manifestRef, res *RetainResult) error {
	for _, d := range drop {
		if err := s.cfg.Store.Delete(ctx, d.Name); err != nil {
			return fmt.Errorf("snapshot: shard %s: delete manifest: %w", s.cfg.Shard, err)
		}
		res.DeletedManifests++
	}
	return nil
}

// deleteSnapshotFiles deletes the non-SST files of snapshots no remaining
// manifest names, counting them in res. Files of a snapshot covering a
// later log id than plan.oldest (possibly one in progress elsewhere), and
// objects whose snapshot id does not parse (not ours), stay.
func (s *Snapshotter) deleteSnapshotFiles(ctx context.Context, plan retentionPlan, res *RetainResult) error {
	shard, st := s.cfg.Shard, s.cfg.Store
	remaining := plan.remaining()
	fileObjs, err := st.List(ctx, shard+"/files/")
	if err != nil {
		return fmt.Errorf("snapshot: shard %s: list files: %w", shard, err)
	}
	for _, o := range fileObjs {
		rest := strings.TrimPrefix(o.Name, shard+"/files/")
		id, _, _ := strings.Cut(rest, "/")
		if remaining[id] {
			continue
		}
		covers, err := parseID(id)
		if err != nil || covers > plan.oldest {
			continue // not ours, or possibly a snapshot in progress elsewhere
		}
		if err := st.Delete(ctx, o.Name); err != nil {
			return fmt.Errorf("snapshot: shard %s: %w", shard, err)
		}
		res.DeletedFiles++
		res.DeletedBytes += o.Size
	}
	return nil
}

// collectSSTs deletes the SSTs named by none of the remaining manifests
// (their ids), counting them in res. If any remaining manifest cannot be
// read, its files are unknown: it keeps every SST this round (a warning,
// not an error).
func (s *Snapshotter) collectSSTs(ctx context.Context, remaining map[string]bool, res *RetainResult) error {
	shard, st := s.cfg.Shard, s.cfg.Store
	named := map[string]bool{}
	for id := range remaining {
		m, err := LoadManifest(ctx, st, ManifestName(shard, id))
		if err != nil {
			s.logger.Warn("cannot read a retained manifest; skipping SST collection", "manifest", ManifestName(shard, id), "error", err)
			return nil
		}
		for _, f := range m.Files {
			named[f.Object] = true
		}
	}
	ssts, err := st.List(ctx, sstPrefix(shard))
	if err != nil {
		return fmt.Errorf("snapshot: shard %s: list SSTs: %w", shard, err)
	}
	for _, o := range ssts {
		if named[o.Name] {
			continue
		}
		if err := st.Delete(ctx, o.Name); err != nil {
			return fmt.Errorf("snapshot: shard %s: %w", shard, err)
		}
		res.DeletedFiles++
		res.DeletedBytes += o.Size
	}
	return nil
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
