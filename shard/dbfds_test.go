package shard

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"
)

// TestShardDBHoldsFourFds: an open shard database holds its LOCK, info
// LOG, MANIFEST and RocksDB log open, and no directory (RocksDB's default
// env holds two per database): what sizes a member's fds per idle shard.
// A flush (which fsyncs the directory) still works through the lazy
// directories.
func TestShardDBHoldsFourFds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	d, err := openShardDB(dir, nil, nil, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.db.Put(d.wo, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	fo := grocksdb.NewDefaultFlushOptions()
	defer fo.Destroy()
	if err := d.db.Flush(fo); err != nil {
		t.Fatalf("flush through lazy directories: %v", err)
	}
	held := heldUnder(t, dir)
	var kinds []string
	for _, h := range held {
		switch {
		case h == "LOCK", h == "LOG", strings.HasPrefix(h, "MANIFEST-"), strings.HasSuffix(h, ".log"):
			kinds = append(kinds, h)
		case strings.HasSuffix(h, ".sst"): // the table cache's, not an idle cost
		default:
			t.Errorf("the database holds %q open", h)
		}
	}
	if len(kinds) != 4 {
		t.Fatalf("the database holds %v open, want LOCK, LOG, a MANIFEST and a .log", held)
	}
}

// heldUnder lists the files under dir this process holds open (dir itself
// as "").
func heldUnder(t *testing.T, dir string) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("open fds are read from /proc (Linux only): %v", err)
	}
	var held []string
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err != nil || (target != dir && !strings.HasPrefix(target, dir+"/")) {
			continue
		}
		held = append(held, strings.TrimPrefix(strings.TrimPrefix(target, dir), "/"))
	}
	sort.Strings(held)
	return held
}
