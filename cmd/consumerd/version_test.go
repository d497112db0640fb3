package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goVersionM is what `go version -m` reports of a binary: its Go version,
// its main module's version and its vcs.* build settings.
type goVersionM struct {
	goVersion, modVersion string
	settings              map[string]string
}

// readGoVersionM runs `go version -m bin`.
func readGoVersionM(tb testing.TB, bin string) goVersionM {
	tb.Helper()
	out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		tb.Fatalf("go version -m %s: %v\n%s", bin, err, out)
	}
	v := goVersionM{settings: map[string]string{}}
	for i, line := range strings.Split(string(out), "\n") {
		f := strings.Split(strings.TrimSpace(line), "\t")
		switch {
		case i == 0:
			_, v.goVersion, _ = strings.Cut(line, ": ")
		case len(f) >= 3 && f[0] == "mod":
			v.modVersion = f[2]
		case len(f) == 2 && f[0] == "build":
			if k, val, ok := strings.Cut(f[1], "="); ok {
				v.settings[k] = val
			}
		}
	}
	return v
}

// wantVersionLine is the line `consumerd --version` must print for a binary
// that `go version -m` describes as v (daemon/version.go's format).
func (v goVersionM) wantVersionLine() string {
	parts := []string{"commit unknown"}
	if rev := v.settings["vcs.revision"]; rev != "" {
		parts[0] = "commit " + rev
		if v.settings["vcs.modified"] == "true" {
			parts = append(parts, "modified")
		}
	}
	if t := v.settings["vcs.time"]; t != "" {
		parts = append(parts, t)
	}
	parts = append(parts, v.goVersion)
	return fmt.Sprintf("consumerd version %s (%s)\n", v.modVersion, strings.Join(parts, ", "))
}

// TestBuildVersion builds consumerd with VCS stamping (-buildvcs=true,
// whatever GOFLAGS says) and checks that --version prints the main module's
// version, the commit, whether the tree was modified, the commit time and
// the Go version, as `go version -m` reads them from the binary.
func TestBuildVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "consumerd")
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Skipf("cannot build with VCS stamping here (no git, or not a checkout): go build -buildvcs=true: %v\n%s", err, out)
	}
	v := readGoVersionM(t, bin)
	if v.settings["vcs.revision"] == "" || v.modVersion == "" || v.modVersion == "(devel)" {
		t.Fatalf("go version -m: a -buildvcs=true build has no revision or module version: %+v", v)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("consumerd --version: %v\n%s", err, out)
	}
	if want := v.wantVersionLine(); string(out) != want {
		t.Errorf("consumerd --version printed\n%q, want\n%q", out, want)
	}
	if modified := strings.Contains(string(out), ", modified,"); modified != (v.settings["vcs.modified"] == "true") {
		t.Errorf("--version %q: modified=%v, but vcs.modified=%s", out, modified, v.settings["vcs.modified"])
	}
}
