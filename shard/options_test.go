package shard_test

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/rockstest"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// sumOperator merges 8-byte little-endian counters by addition.
type sumOperator struct{}

func (sumOperator) Name() string { return "consumerd.test.sum" }

func (sumOperator) FullMerge(_, existing []byte, operands [][]byte) ([]byte, bool) {
	var n uint64
	if len(existing) == 8 {
		n = binary.LittleEndian.Uint64(existing)
	}
	for _, op := range operands {
		if len(op) != 8 {
			return nil, false
		}
		n += binary.LittleEndian.Uint64(op)
	}
	return binary.LittleEndian.AppendUint64(nil, n), true
}

// mergeCounter counts tokens with RocksDB merge operands (its OptionsIniter
// installs the operator, on standbys too) and leaves "tmp/" scratch keys
// that its Filterer drops at compaction.
type mergeCounter struct{}

var (
	_ shard.Filterer = mergeCounter{}
	_ shard.Filterer = everythingFilter{}
	_ shard.Filterer = rewriteFilter{}
)

func (mergeCounter) InitOptions(o *grocksdb.Options) { o.SetMergeOperator(sumOperator{}) }

func (mergeCounter) Filter(_ int, key, _ []byte) (bool, []byte) {
	return strings.HasPrefix(string(key), "tmp/"), nil
}

func (mergeCounter) Consume(s shard.Shard, env topic.Envelope, _ shard.Publisher) error {
	one := binary.LittleEndian.AppendUint64(nil, 1)
	for _, tok := range strings.Fields(string(env.Message.Payload)) {
		s.Transaction().Merge([]byte("m/"+tok), one)
		s.Transaction().Put([]byte("tmp/"+tok), []byte("x"))
	}
	return nil
}

func (mergeCounter) Flush(shard.Shard, shard.Publisher) error { return nil }

// everythingFilter would drop every key: consumerd's own keys must survive.
type everythingFilter struct{ mergeCounter }

func (everythingFilter) Filter(int, []byte, []byte) (bool, []byte) { return true, nil }

// rewriteFilter would rewrite every value: consumerd's own keys must keep
// theirs.
type rewriteFilter struct{ mergeCounter }

func (rewriteFilter) Filter(int, []byte, []byte) (bool, []byte) { return false, []byte("rewritten") }

func mergeCounts(t *testing.T, db *grocksdb.DB) map[string]int64 {
	t.Helper()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	it := db.NewIterator(ro)
	defer it.Close()
	out := map[string]int64{}
	prefix := []byte("m/")
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		k, v := it.Key(), it.Value()
		out[strings.TrimPrefix(string(k.Data()), "m/")] = int64(binary.LittleEndian.Uint64(v.Data()))
		k.Free()
		v.Free()
	}
	return out
}

func countPrefix(t *testing.T, db *grocksdb.DB, prefix string) int {
	t.Helper()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	it := db.NewIterator(ro)
	defer it.Close()
	n := 0
	for it.Seek([]byte(prefix)); it.ValidForPrefix([]byte(prefix)); it.Next() {
		n++
	}
	return n
}

// TestOptionsIniterAndFilterer: a Consumer's merge operator is installed on
// the primary and on a standby (whose replay applies the same merges), and
// its compaction filter drops or rewrites its keys but never consumerd's
// own.
func TestOptionsIniterAndFilterer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		consumer shard.Consumer
	}{{"filter-scratch", mergeCounter{}}, {"filter-everything", everythingFilter{}}, {"rewrite-everything", rewriteFilter{}}} {
		t.Run(tc.name, func(t *testing.T) {
			app := wordcount.App()
			app.Name = "merger"
			c := tc.consumer
			app.NewConsumer = func() shard.Consumer { return c }
			e := shardtest.NewCluster(t, memory.NewBuilder(), app)
			spec := &shard.Spec{ID: "m-0", App: "merger", HotStandbys: 1, Sources: []shard.Source{{Topic: wordcount.InputTopic, Partition: 0}}}
			e.PutSpec(spec)
			lines := shardtest.Corpus(17, 60)
			e.Publish(0, lines...)
			dirB := t.TempDir()
			a := e.StartNode("a", t.TempDir())
			b := e.StartNode("b", dirB)
			e.Assign(a, spec.ID, 0)
			e.Assign(b, spec.ID, 1)
			e.WaitState(b, spec.ID, 1, allocator.StateStandby)
			want := wordcount.Count(lines)
			last := e.LastID("words/0000")

			shardtest.Eventually(t, "primary consumed", func() (bool, string) {
				sh, release, ok := a.Service.Primary(spec.ID)
				if !ok {
					return false, "no primary"
				}
				defer release()
				offs, err := recoverylog.LoadOffsets(sh.Database())
				if err != nil || offs["words/0000"].ID != last {
					return false, fmt.Sprintf("offsets %v %v", offs, err)
				}
				return true, ""
			})
			sh, release, _ := a.Service.Primary(spec.ID)
			db := sh.Database()
			if tc.name == "filter-scratch" {
				if got := mergeCounts(t, db); !reflect.DeepEqual(got, want) {
					t.Fatalf("merged counts %v, want %v", got, want)
				}
			}
			if countPrefix(t, db, "tmp/") == 0 {
				t.Fatal("no scratch keys before compaction")
			}
			db.CompactRange(grocksdb.Range{})
			if tc.name == "rewrite-everything" {
				if got := rockstest.Map(t, db); got["tmp/"+strings.Fields(lines[0])[0]] != "rewritten" {
					t.Errorf("scratch key not rewritten by compaction")
				}
			} else if n := countPrefix(t, db, "tmp/"); n != 0 {
				t.Errorf("%d scratch keys survived compaction", n)
			}
			if tc.name == "filter-scratch" {
				if got := mergeCounts(t, db); !reflect.DeepEqual(got, want) {
					t.Errorf("compaction changed the counts: %v", got)
				}
			}
			offs, err := recoverylog.LoadOffsets(db)
			if err != nil || offs["words/0000"].ID != last {
				t.Errorf("offsets after compaction: %v %v", offs, err)
			}
			if pos, err := recoverylog.LoadPosition(db); err != nil || pos.LogID == 0 {
				t.Errorf("position after compaction: %v %v", pos, err)
			}
			release()

			if tc.name == "filter-scratch" {
				// The standby replayed the same merges.
				shardtest.Eventually(t, "standby caught up", func() (bool, string) {
					sa, sb := a.Service.Status(), b.Service.Status()
					return len(sa) == 1 && len(sb) == 1 && sa[0].Applied == sb[0].Applied, fmt.Sprintf("%+v %+v", sa, sb)
				})
				b.Kill()
				opts := grocksdb.NewDefaultOptions()
				opts.SetMergeOperator(sumOperator{}) // not destroyed: grocksdb double-frees it (see shard's destroyOptions)
				sdb, err := grocksdb.OpenDbForReadOnly(opts, filepath.Join(dirB, "shards", spec.ID), false)
				if err != nil {
					t.Fatal(err)
				}
				defer sdb.Close()
				if got := mergeCounts(t, sdb); !reflect.DeepEqual(got, want) {
					t.Fatalf("standby merged counts %v, want %v", got, want)
				}
			}
		})
	}
}
