package snapshot

import (
	"context"
	"fmt"
	"time"

	"github.com/linxGnu/grocksdb"
)

// DefaultCompactAbove is Config.CompactAbove when zero: Take compacts the
// database before its checkpoint when the checkpoint would hold more than
// 1.25 times the live data.
const DefaultCompactAbove = 1.25

// Why a compaction before the checkpoint: a restore moves every byte of
// the checkpoint, and an LSM tree holds overwritten versions until
// compaction drops them — in L0 (up to level0_file_num_compaction_trigger
// memtables' worth) and in the upper levels. With RocksDB's defaults, the
// newest snapshot of a state overwritten many times can hold several times
// the live data depending on where compaction stood, and recovery then
// takes correspondingly longer than for the same state written once.
// Compacting the whole key range first leaves one version of each key; it
// costs a rewrite of the database, paid only when the dead data is worth
// it (for a large state, rarely: there leveled compaction keeps the dead
// share small).
//
// How much is dead is not known without compacting. RocksDB's estimate of
// the live data (estimate-live-data-size) counts the bottom level and the
// files above that do not overlap it, so it is close for overwrites and
// far too low for a state that grows (new keys in L0 over the bottom
// level's range look dead): trusting it alone, a state written once as it
// grows would be compacted at nearly every snapshot and upload several
// times its log. So a compaction that drops less than half of what the
// estimate took for dead starts a cool-down: none before twice the
// compacted database's size in log bytes was applied. A state that only
// grows is then compacted at sizes about three times apart (the rewrites
// add up to half the final size at most), and one that turns from growing
// to overwriting is compacted again once the cool-down ends
// (compactPolicy).

// compactMinDead is the least dead data worth a compaction: below it a
// restore moves little extra.
const compactMinDead = 16 << 20

// coolDownFactor: after a compaction that found the estimate wrong, none
// before coolDownFactor × its output's size of log bytes.
const coolDownFactor = 2

// liveSizes is what a checkpoint of a database would hold, and RocksDB's
// estimate of its live data.
type liveSizes struct {
	checkpoint uint64 // live SST files plus unflushed memtables
	live       uint64 // rocksdb.estimate-live-data-size
}

// suspect is what RocksDB's estimate takes for dead.
func (s liveSizes) suspect() uint64 {
	if s.checkpoint <= s.live {
		return 0
	}
	return s.checkpoint - s.live
}

// compactPolicy decides before each snapshot whether to compact first. It
// is pure: Take feeds it the sizes it reads, the log bytes applied so far
// (its clock), and the outcome of each compaction.
type compactPolicy struct {
	above float64 // compact when the checkpoint exceeds above × live
	// coolUntil: no compaction before the log reached this many applied
	// bytes (after one that found little dead).
	coolUntil int64
}

func newCompactPolicy(above float64) *compactPolicy { return &compactPolicy{above: above} }

// due reports whether to compact before a checkpoint of s, applied log
// bytes into the log: outside a cool-down, with at least compactMinDead
// suspected dead and the checkpoint more than above × the live estimate.
func (p *compactPolicy) due(s liveSizes, applied int64) bool {
	return applied >= p.coolUntil && s.suspect() >= compactMinDead && float64(s.checkpoint) > p.above*float64(s.live)
}

// compacted learns from a compaction that started applied log bytes into
// the log and took the checkpoint from before to after bytes while written
// more log bytes were applied (they are in after, not in before): when it
// dropped less than half of the suspected dead data, a cool-down starts.
func (p *compactPolicy) compacted(before liveSizes, after uint64, applied, written int64) {
	var dropped uint64
	if in := before.checkpoint + uint64(max(0, written)); in > after {
		dropped = in - after
	}
	p.coolUntil = 0
	if 2*dropped < before.suspect() {
		p.coolUntil = applied + coolDownFactor*int64(after)
	}
}

// readLiveSizes reads db's properties.
func readLiveSizes(db *grocksdb.DB) (liveSizes, error) {
	var s liveSizes
	for _, p := range []struct {
		name string
		add  *uint64
	}{
		{"rocksdb.live-sst-files-size", &s.checkpoint},
		{"rocksdb.cur-size-all-mem-tables", &s.checkpoint},
		{"rocksdb.estimate-live-data-size", &s.live},
	} {
		v, ok := db.GetIntProperty(p.name)
		if !ok {
			return liveSizes{}, fmt.Errorf("rocksdb property %s unavailable", p.name)
		}
		*p.add += v
	}
	return s, nil
}

// compaction is what compactIfDue did.
type compaction struct {
	ran           bool
	before, after uint64 // checkpoint sizes (after: when ran)
	took          time.Duration
}

// compactIfDue compacts src.DB's whole key range when the policy says so.
// RocksDB's own flushes and compactions go on meanwhile; when ctx ends the
// compaction is abandoned (RocksDB stops it), so a primary that stops is
// not held up by it.
func (s *Snapshotter) compactIfDue(ctx context.Context, src Source) (compaction, error) {
	if s.compact == nil {
		return compaction{}, nil
	}
	db := src.DB
	sizes, err := readLiveSizes(db)
	if err != nil {
		return compaction{}, fmt.Errorf("snapshot: shard %s: %w", s.cfg.Shard, err)
	}
	var applied int64
	if src.Recorder != nil { // nil for an empty database (Take returns ErrEmpty)
		applied = src.Recorder.AppliedBytes()
	}
	c := compaction{before: sizes.checkpoint}
	if !s.compact.due(sizes, applied) {
		return c, nil
	}
	start := time.Now()
	opts := grocksdb.NewCompactRangeOptions()
	defer opts.Destroy()
	opts.SetExclusiveManualCompaction(false) // flushes and automatic compactions go on
	disabled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		db.DisableManualCompaction() // the running CompactRange returns early
		close(disabled)
	})
	db.CompactRangeOpt(grocksdb.Range{}, opts)
	c.took = time.Since(start)
	if !stop() {
		<-disabled
		db.EnableManualCompaction()
		return c, ctx.Err()
	}
	// RocksDB's C API reports no outcome: the sizes after tell.
	after, err := readLiveSizes(db)
	if err != nil {
		return c, fmt.Errorf("snapshot: shard %s: %w", s.cfg.Shard, err)
	}
	c.ran, c.after = true, after.checkpoint
	var written int64
	if src.Recorder != nil {
		written = src.Recorder.AppliedBytes() - applied
	}
	s.compact.compacted(sizes, after.checkpoint, applied, written)
	return c, nil
}
