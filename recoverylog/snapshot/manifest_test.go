package snapshot_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/recoverylog/snapshot"
)

const goodManifest = `{"version":1,"shard":"s","id":"00000000000000000042-00000000000000000007-0a0b0c0d","term":7,"log_id":42,
"position":{"seq":9,"checksum":1,"log_id":42,"term":7},"created":"2026-01-01T00:00:00Z",
"files":[{"name":"CURRENT","object":"s/files/00000000000000000042-00000000000000000007-0a0b0c0d/CURRENT","size":16,"sha256":"` + sum64 + `"},
{"name":"MANIFEST-000005","object":"s/files/00000000000000000042-00000000000000000007-0a0b0c0d/MANIFEST-000005","size":100,"sha256":"` + sum64 + `"},
{"name":"000009.sst","object":"s/sst/` + sum64 + `.sst","size":1000,"sha256":"` + sum64 + `"}]}`

const sum64 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// TestDecodeManifest: a good manifest decodes; each bad one is refused with
// an error naming what is wrong, never a panic.
func TestDecodeManifest(t *testing.T) {
	m, err := snapshot.DecodeManifest([]byte(goodManifest))
	if err != nil {
		t.Fatal(err)
	}
	if m.LogID != 42 || len(m.Files) != 3 || m.Files[0].Name != "000009.sst" || m.Size() != 1116 {
		t.Fatalf("decoded %+v", m)
	}
	again, err := snapshot.DecodeManifest(m.Encode())
	if err != nil || again.ID != m.ID || len(again.Files) != 3 {
		t.Fatalf("round trip: %+v, %v", again, err)
	}
	cases := []struct{ name, from, to, want string }{
		{"version", `"version":1`, `"version":2`, "version 2"},
		{"shard slash", `"shard":"s"`, `"shard":"a/b"`, "shard"},
		{"id", `"id":"00000000000000000042-00000000000000000007-0a0b0c0d"`, `"id":"nope"`, "snapshot id"},
		{"log id mismatch", `"term":7,"log_id":42`, `"term":7,"log_id":43`, "disagree"},
		{"empty position", `"seq":9`, `"seq":0`, "position.seq"},
		{"file name", `"name":"CURRENT"`, `"name":"../CURRENT"`, "files[0].name"},
		{"foreign object", `"object":"s/sst/`, `"object":"other/sst/`, "files[2].object"},
		{"negative size", `"size":1000`, `"size":-1`, "files[2].size"},
		{"bad sha", `"size":16,"sha256":"e3`, `"size":16,"sha256":"zz`, "files[0].sha256"},
		{"no CURRENT", `"name":"CURRENT"`, `"name":"CURRENT2"`, "lack CURRENT"},
		{"not json", `{"version"`, `{"version`, "bad manifest"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw := strings.Replace(goodManifest, c.from, c.to, 1)
			if raw == goodManifest {
				t.Fatalf("case does not change the manifest")
			}
			_, err := snapshot.DecodeManifest([]byte(raw))
			if err == nil || !errors.Is(err, snapshot.ErrBadManifest) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want ErrBadManifest mentioning %q", err, c.want)
			}
		})
	}
}

func FuzzDecodeManifest(f *testing.F) {
	f.Add([]byte(goodManifest))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := snapshot.DecodeManifest(b)
		if err == nil {
			if verr := m.Validate(); verr != nil {
				t.Fatalf("decoded manifest does not validate: %v", verr)
			}
		}
	})
}
