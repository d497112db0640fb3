package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestBuildInfo checks what newInfo takes from runtime/debug's build
// information and how --version prints it.
func TestBuildInfo(t *testing.T) {
	const rev = "c3ed92c8856ead7e41c390ddc9bfbea53d6e4e12"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "-buildmode", Value: "exe"}, {Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-12-02T02:25:48Z"}, {Key: "vcs.modified", Value: modified}}
	}
	cases := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want Info
		line string
	}{
		{"no build info", nil, false, Info{Version: develVersion, Go: runtime.Version()},
			"(devel) (commit unknown, " + runtime.Version() + ")"},
		{"devel, no vcs (-buildvcs=false, go run)", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/consumerd/consumerd", Version: "(devel)"}}, true,
			Info{Version: "(devel)", Go: "go1.26.8"}, "(devel) (commit unknown, go1.26.8)"},
		{"empty main version (tests)", &debug.BuildInfo{GoVersion: "go1.26.8"}, true,
			Info{Version: develVersion, Go: "go1.26.8"}, "(devel) (commit unknown, go1.26.8)"},
		{"pseudo-version, modified tree", &debug.BuildInfo{GoVersion: "go1.26.8", Settings: vcs("true"),
			Main: debug.Module{Version: "v0.0.0-20261202022548-c3ed92c8856e+dirty"}}, true,
			Info{Version: "v0.0.0-20261202022548-c3ed92c8856e+dirty", Commit: rev, Modified: true, Time: "2026-12-02T02:25:48Z", Go: "go1.26.8"},
			"v0.0.0-20261202022548-c3ed92c8856e+dirty (commit " + rev + ", modified, 2026-12-02T02:25:48Z, go1.26.8)"},
		{"tag, clean tree", &debug.BuildInfo{GoVersion: "go1.26.8", Settings: vcs("false"), Main: debug.Module{Version: "v1.2.0"}}, true,
			Info{Version: "v1.2.0", Commit: rev, Time: "2026-12-02T02:25:48Z", Go: "go1.26.8"},
			"v1.2.0 (commit " + rev + ", 2026-12-02T02:25:48Z, go1.26.8)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := newInfo(tc.bi, tc.ok)
			if got != tc.want {
				t.Errorf("newInfo = %+v, want %+v", got, tc.want)
			}
			if line := got.String(); line != tc.line {
				t.Errorf("String() = %q, want %q", line, tc.line)
			}
		})
	}
}

// TestBuildInfoMetric checks that consumerd_build_info is 1 on the default
// registry (the one /metrics serves), labelled with this binary's build.
func TestBuildInfoMetric(t *testing.T) {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := Current.labels()
	for _, mf := range mfs {
		if mf.GetName() != "consumerd_build_info" {
			continue
		}
		if len(mf.GetMetric()) != 1 {
			t.Fatalf("consumerd_build_info has %d series, want 1", len(mf.GetMetric()))
		}
		m := mf.GetMetric()[0]
		got := prometheus.Labels{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if len(got) != len(want) || got["version"] != want["version"] || got["commit"] != want["commit"] || got["go"] != want["go"] {
			t.Errorf("consumerd_build_info labels %v, want %v", got, want)
		}
		if v := m.GetGauge().GetValue(); v != 1 {
			t.Errorf("consumerd_build_info = %v, want 1", v)
		}
		return
	}
	t.Fatal("consumerd_build_info is not on the default registry")
}
