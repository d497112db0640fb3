package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// develVersion is the version of a build that does not know its own: `go
// run`, `go test`, or `go build` with -buildvcs=false or outside a checkout.
const develVersion = "(devel)"

// Info is what a binary knows of its own build: what the Go toolchain
// embeds in it (runtime/debug.ReadBuildInfo).
type Info struct {
	// Version is the main module's version: a tag (v1.2.0), a pseudo-version
	// naming the commit (v0.0.0-20261202022548-c3ed92c8856e, with "+dirty"
	// when the tree was modified), or develVersion when unknown.
	Version string
	// Commit is the VCS revision the binary was built from (vcs.revision),
	// "" when unknown.
	Commit string
	// Modified reports uncommitted changes in the tree at build time
	// (vcs.modified).
	Modified bool
	// Time is the commit's time (vcs.time, RFC 3339), "" when unknown.
	Time string
	// Go is the toolchain that built the binary, e.g. go1.26.8.
	Go string
}

// Current is this binary's build. --version prints it, the member spec
// carries its Version, /v1/status reports it, and the gauge
// consumerd_build_info has it as labels.
var Current = func() Info {
	bi, ok := debug.ReadBuildInfo()
	return newInfo(bi, ok)
}()

// newInfo extracts the main module's version and the vcs.* settings
// from bi (ok false: the binary has no build information). Missing parts
// are "" (Version: develVersion; Go: the running toolchain's version).
func newInfo(bi *debug.BuildInfo, ok bool) Info {
	b := Info{Version: develVersion, Go: runtime.Version()}
	if !ok || bi == nil {
		return b
	}
	if v := bi.Main.Version; v != "" {
		b.Version = v
	}
	if bi.GoVersion != "" {
		b.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		case "vcs.time":
			b.Time = s.Value
		}
	}
	return b
}

// String is the one line `consumerd --version` prints after "consumerd
// version ": the version, then in parentheses the commit (or "commit
// unknown"), "modified" when the tree was, the commit time, and the Go
// version, e.g.
//
//	v0.0.0-20261202022548-c3ed92c8856e+dirty (commit c3ed92c8856ead7e41c390ddc9bfbea53d6e4e12, modified, 2026-12-02T02:25:48Z, go1.26.8)
func (b Info) String() string {
	parts := []string{"commit unknown"}
	if b.Commit != "" {
		parts[0] = "commit " + b.Commit
		if b.Modified {
			parts = append(parts, "modified")
		}
	}
	if b.Time != "" {
		parts = append(parts, b.Time)
	}
	parts = append(parts, b.Go)
	return fmt.Sprintf("%s (%s)", b.Version, strings.Join(parts, ", "))
}

// labels are consumerd_build_info's: version, commit ("unknown" when
// unknown) and go.
func (b Info) labels() prometheus.Labels {
	commit := b.Commit
	if commit == "" {
		commit = "unknown"
	}
	return prometheus.Labels{"version": b.Version, "commit": commit, "go": b.Go}
}

// consumerd_build_info is the constant 1 labelled with this binary's build,
// registered on the default registry when the package loads: /metrics of
// every member serves it, so a query tells which members run which build.
var _ = promauto.NewGaugeFunc(prometheus.GaugeOpts{
	Name:        "consumerd_build_info",
	Help:        "Always 1; the labels name the build: the main module's version, the VCS commit and the Go version.",
	ConstLabels: Current.labels(),
}, func() float64 { return 1 })
