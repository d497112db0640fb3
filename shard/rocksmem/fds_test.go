package rocksmem

import (
	"testing"

	"github.com/linxGnu/grocksdb"
)

// TestUseLazyDirectories: the options carry the lazy directory env after
// UseLazyDirectories, and only then.
func TestUseLazyDirectories(t *testing.T) {
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	if usesLazyDirectories(opts) {
		t.Fatal("fresh options already use the lazy directory env")
	}
	if err := UseLazyDirectories(opts); err != nil {
		t.Fatal(err)
	}
	if !usesLazyDirectories(opts) {
		t.Fatal("UseLazyDirectories did not set the env")
	}
}
