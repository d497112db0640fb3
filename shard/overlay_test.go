package shard

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/rockstest"
)

// TestOverlayAgainstRocksDB checks that the overlay reads a real RocksDB
// write batch the way the database would after applying it.
func TestOverlayAgainstRocksDB(t *testing.T) {
	db := rockstest.Open(t)
	ro, wo := grocksdb.NewDefaultReadOptions(), grocksdb.NewDefaultWriteOptions()
	defer ro.Destroy()
	defer wo.Destroy()

	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	ov := newOverlay()
	steps := []func(){
		func() { wb.Put([]byte("a"), []byte("1")) },
		func() { wb.Put([]byte("b"), []byte("2")) },
		func() { wb.Delete([]byte("a")) },
		func() { wb.Put([]byte("c"), []byte("3")) },
		func() { wb.DeleteRange([]byte("b"), []byte("c")) },
		func() { wb.Put([]byte("a"), []byte("4")) },
		func() { wb.SingleDelete([]byte("c")) },
		func() { wb.PutLogData([]byte("note")) },
		func() { wb.Put([]byte("big"), make([]byte, 300)) }, // multi-byte varint length
	}
	keys := []string{"a", "b", "c", "big", "zz"}
	for i, step := range steps {
		step()
		// Parse incrementally, as Get does.
		if err := ov.update(wb.Data()); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if err := db.Write(wo, wb); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		want, err := db.GetBytes(ro, []byte(k))
		if err != nil {
			t.Fatal(err)
		}
		res, got := ov.lookup([]byte(k))
		switch {
		case want == nil && res == lookupValue:
			t.Errorf("%s: overlay has %q, db has none", k, got)
		case want != nil && (res != lookupValue || string(got) != string(want)):
			t.Errorf("%s: overlay %v %q, db %q", k, res, got, want)
		}
	}
	if res, _ := ov.lookup([]byte("zz")); res != lookupMiss {
		t.Errorf("untouched key: %v", res)
	}
	if res, _ := ov.lookup([]byte("b")); res != lookupDeleted {
		t.Errorf("range-deleted key: %v", res)
	}
}

// The overlay reads only the default column family: a write to another one
// is an error, not a write Get would miss.
func TestOverlayRejectsOtherColumnFamilies(t *testing.T) {
	db := rockstest.Open(t)
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	other, err := db.CreateColumnFamily(opts, "other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Destroy()
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	wb.Put([]byte("a"), []byte("1"))
	wb.PutCF(other, []byte("b"), []byte("2"))
	err = newOverlay().update(wb.Data())
	if err == nil || !strings.Contains(err.Error(), "column family 1") {
		t.Fatalf("a put to column family 1: %v", err)
	}
}

func TestOverlayMergeAndLayers(t *testing.T) {
	opts := grocksdb.NewDefaultOptions()
	opts.SetCreateIfMissing(true)
	defer opts.Destroy()
	db, err := grocksdb.OpenDb(opts, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ro, wo := grocksdb.NewDefaultReadOptions(), grocksdb.NewDefaultWriteOptions()
	defer ro.Destroy()
	defer wo.Destroy()
	if err := db.Put(wo, []byte("k"), []byte("db")); err != nil {
		t.Fatal(err)
	}
	if err := db.Put(wo, []byte("gone"), []byte("db")); err != nil {
		t.Fatal(err)
	}

	inflight := grocksdb.NewWriteBatch()
	defer inflight.Destroy()
	inflight.Put([]byte("k"), []byte("inflight"))
	inflight.Delete([]byte("gone"))
	inflight.Merge([]byte("m"), []byte("+1"))
	ov := newOverlay()
	if err := ov.update(inflight.Data()); err != nil {
		t.Fatal(err)
	}
	sh := &primaryShard{spec: &Spec{ID: "t"}, db: db, ro: ro, wo: wo, txn: grocksdb.NewWriteBatch(), open: newOverlay(), inflight: []*overlay{ov}}
	defer sh.txn.Destroy()

	get := func(k string) string {
		t.Helper()
		v, err := sh.Get([]byte(k))
		if err != nil {
			t.Fatalf("Get(%s): %v", k, err)
		}
		if v == nil {
			return "<nil>"
		}
		return string(v)
	}
	if got := get("k"); got != "inflight" {
		t.Errorf("k = %s, want inflight", got)
	}
	if got := get("gone"); got != "<nil>" {
		t.Errorf("gone = %s", got)
	}
	sh.txn.Put([]byte("k"), []byte("open"))
	if got := get("k"); got != "open" {
		t.Errorf("k = %s, want open", got)
	}
	sh.txn.Put([]byte("gone"), []byte("back"))
	if got := get("gone"); got != "back" {
		t.Errorf("gone = %s, want back", got)
	}
	if got := get("other"); got != "<nil>" {
		t.Errorf("other = %s", got)
	}
	if _, err := sh.Get([]byte("m")); !errors.Is(err, ErrMergePending) {
		t.Errorf("pending merge: err = %v", err)
	}
	// A cleared batch is detected, not misread.
	sh.txn.Clear()
	sh.txn.Put([]byte("x"), []byte("1"))
	if _, err := sh.Get([]byte("x")); err == nil {
		t.Errorf("cleared batch not detected")
	}
}

// FuzzOverlay applies random writes to a real WriteBatch, parsing it
// incrementally at random points, and checks the overlay against a model
// of the batch's effect.
func FuzzOverlay(f *testing.F) {
	f.Add([]byte{0, 1, 5, 1, 2, 0, 2, 0, 3, 3, 1, 4})
	f.Add([]byte{3, 0, 7, 0, 1, 2, 9, 2, 1, 1, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		wb := grocksdb.NewWriteBatch()
		defer wb.Destroy()
		ov := newOverlay()
		type state struct {
			val     string
			deleted bool
		}
		model := map[string]state{}
		keys := []string{"a", "b", "c", "d", "e"}
		for i := 0; i+2 < len(ops); i += 3 {
			op, k1, k2 := ops[i]%5, keys[int(ops[i+1])%len(keys)], keys[int(ops[i+2])%len(keys)]
			switch op {
			case 0:
				v := fmt.Sprintf("v%d", i)
				wb.Put([]byte(k1), []byte(v))
				model[k1] = state{val: v}
			case 1:
				wb.Delete([]byte(k1))
				model[k1] = state{deleted: true}
			case 2:
				wb.SingleDelete([]byte(k1))
				model[k1] = state{deleted: true}
			case 3:
				if k1 > k2 {
					k1, k2 = k2, k1
				}
				wb.DeleteRange([]byte(k1), []byte(k2))
				for _, k := range keys {
					if k >= k1 && k < k2 {
						model[k] = state{deleted: true}
					}
				}
			case 4:
				if err := ov.update(wb.Data()); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := ov.update(wb.Data()); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			res, v := ov.lookup([]byte(k))
			m, touched := model[k]
			switch {
			case !touched && res != lookupMiss:
				t.Fatalf("%s: untouched but overlay says %v", k, res)
			case touched && m.deleted && res != lookupDeleted:
				t.Fatalf("%s: deleted but overlay says %v %q", k, res, v)
			case touched && !m.deleted && (res != lookupValue || string(v) != m.val):
				t.Fatalf("%s: want %q, overlay says %v %q", k, m.val, res, v)
			}
		}
	})
}
