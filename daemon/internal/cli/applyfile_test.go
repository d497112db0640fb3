package cli

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/shard"
)

func TestParseApplyFile(t *testing.T) {
	apps := map[string]shard.App{"wordcount": wordcount.App()}
	files, _ := filepath.Glob("testdata/apply/*.*")
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".golden") {
			continue
		}
		n++
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			entries, err := parseApplyFile(data, apps)
			var got string
			if err != nil {
				got = "error: " + err.Error() + "\n"
			} else {
				type out struct {
					ID     string      `json:"id"`
					Delete bool        `json:"delete,omitempty"`
					Spec   *shard.Spec `json:"spec,omitempty"`
				}
				var outs []out
				for _, e := range entries {
					outs = append(outs, out{e.ID, e.Delete, e.Spec})
				}
				b, _ := json.MarshalIndent(outs, "", "  ")
				got = string(b) + "\n"
			}
			golden := strings.TrimSuffix(f, filepath.Ext(f)) + "." + filepath.Ext(f)[1:] + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("golden: %v (run with -update to create)", err)
			}
			if got != string(want) {
				t.Fatalf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
	if n == 0 {
		t.Fatal("no testdata/apply cases")
	}
}

var update = flag.Bool("update", false, "rewrite testdata golden files")
