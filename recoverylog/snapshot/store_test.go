package snapshot_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sort"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/consumerd/consumerd/recoverylog/snapshot"
)

// TestStoreContract runs every store through the Store contract.
func TestStoreContract(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			st := newStore(t, kind)
			ctx := context.Background()
			get := func(name string) (string, error) {
				rc, err := st.Get(ctx, name)
				if err != nil {
					return "", err
				}
				defer rc.Close()
				b, err := io.ReadAll(rc)
				return string(b), err
			}
			put := func(name, body string) {
				t.Helper()
				if err := st.Put(ctx, name, strings.NewReader(body), int64(len(body))); err != nil {
					t.Fatalf("put %s: %v", name, err)
				}
			}

			if _, err := get("s/missing"); !errors.Is(err, snapshot.ErrNotFound) {
				t.Fatalf("get missing: %v, want ErrNotFound", err)
			}
			if _, err := st.Stat(ctx, "s/missing"); !errors.Is(err, snapshot.ErrNotFound) {
				t.Fatalf("stat missing: %v, want ErrNotFound", err)
			}
			if objs, err := st.List(ctx, "s/"); err != nil || len(objs) != 0 {
				t.Fatalf("list empty store: %v %v", objs, err)
			}
			put("s/a/one", "first")
			put("s/a/two", "second body")
			put("s/b/three", "")
			big := bytes.Repeat([]byte("0123456789abcdef"), 40000) // 640 KB: several chunks
			if err := st.Put(ctx, "s/big", bytes.NewReader(big), int64(len(big))); err != nil {
				t.Fatal(err)
			}
			put("t/other", "x")
			if got, err := get("s/a/one"); err != nil || got != "first" {
				t.Fatalf("get s/a/one = %q, %v", got, err)
			}
			if got, err := get("s/b/three"); err != nil || got != "" {
				t.Fatalf("get empty object = %q, %v", got, err)
			}
			if got, err := get("s/big"); err != nil || got != string(big) {
				t.Fatalf("get big: %d bytes, %v", len(got), err)
			}
			if oi, err := st.Stat(ctx, "s/a/two"); err != nil || oi.Size != int64(len("second body")) {
				t.Fatalf("stat = %+v, %v", oi, err)
			}
			// Replace.
			put("s/a/one", "replaced")
			if got, _ := get("s/a/one"); got != "replaced" {
				t.Fatalf("after replace: %q", got)
			}
			// List by plain string prefix.
			names := func(prefix string) []string {
				objs, err := st.List(ctx, prefix)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, o := range objs {
					out = append(out, o.Name)
				}
				sort.Strings(out)
				return out
			}
			if got := strings.Join(names("s/"), ","); got != "s/a/one,s/a/two,s/b/three,s/big" {
				t.Fatalf("list s/ = %s", got)
			}
			if got := strings.Join(names("s/a/t"), ","); got != "s/a/two" {
				t.Fatalf("list s/a/t = %s", got)
			}
			if got := strings.Join(names("s/b"), ","); got != "s/b/three,s/big" {
				t.Fatalf("list s/b = %s", got)
			}
			// A body shorter or longer than declared fails and leaves the old object.
			if err := st.Put(ctx, "s/a/one", strings.NewReader("short"), 10); err == nil {
				t.Fatal("short body accepted")
			}
			if err := st.Put(ctx, "s/a/one", strings.NewReader("much too long"), 3); err == nil {
				t.Fatal("long body accepted")
			}
			if err := st.Put(ctx, "s/a/one", iotest.ErrReader(errors.New("disk on fire")), 4); err == nil {
				t.Fatal("failing reader accepted")
			}
			if got, err := get("s/a/one"); err != nil || got != "replaced" {
				t.Fatalf("after failed puts: %q, %v (want the previous object)", got, err)
			}
			// Delete, twice.
			for i := 0; i < 2; i++ {
				if err := st.Delete(ctx, "s/a/two"); err != nil {
					t.Fatalf("delete #%d: %v", i, err)
				}
			}
			if _, err := get("s/a/two"); !errors.Is(err, snapshot.ErrNotFound) {
				t.Fatalf("get deleted: %v", err)
			}
			if got := strings.Join(names("s/a/"), ","); got != "s/a/one" {
				t.Fatalf("list after delete = %s", got)
			}
			put("s/a/two", "back again")
			if got, err := get("s/a/two"); err != nil || got != "back again" {
				t.Fatalf("get after delete and put = %q, %v", got, err)
			}
			// Bad names are refused with an error, never a panic.
			for _, bad := range []string{"", "/abs", "a//b", "a/../b", "a/./b", "trailing/", "..", "a\\b"} {
				if err := st.Put(ctx, bad, strings.NewReader("x"), 1); err == nil {
					t.Errorf("put %q accepted", bad)
				}
				if _, err := st.Get(ctx, bad); err == nil {
					t.Errorf("get %q accepted", bad)
				}
			}
		})
	}
}

func TestBucketName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"consumerd", "consumerd-snapshots"}, // the default prefix's: unchanged
		{"alpha", "alpha-snapshots"},
		{"a-sb", "a-sb-snapshots"},
	} {
		if got := snapshot.BucketName(c.in); got != c.want {
			t.Errorf("BucketName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
