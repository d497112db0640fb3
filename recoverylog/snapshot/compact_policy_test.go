package snapshot

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestCompactPolicy runs testdata/compact: "new [above=X]" starts a
// policy; "snapshot checkpoint=MiB live=MiB log=MiB" asks whether to
// compact first (due or skip); "compacted checkpoint=MiB live=MiB
// after=MiB log=MiB [written=MiB]" tells it what a compaction did (it
// prints the cool-down that follows, if any). log is the log bytes applied
// so far, written those applied while the compaction ran.
func TestCompactPolicy(t *testing.T) {
	var p *compactPolicy
	datadriven.RunTest(t, "testdata/compact", func(t *testing.T, d *datadriven.TestData) string {
		mib := func(key string) uint64 {
			var s string
			d.ScanArgs(t, key, &s)
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				d.Fatalf(t, "%s=%s: %v", key, s, err)
			}
			return uint64(v * (1 << 20))
		}
		switch d.Cmd {
		case "new":
			above := DefaultCompactAbove
			if d.HasArg("above") {
				var s string
				d.ScanArgs(t, "above", &s)
				var err error
				if above, err = strconv.ParseFloat(s, 64); err != nil {
					d.Fatalf(t, "above=%s: %v", s, err)
				}
			}
			p = newCompactPolicy(above)
			return "ok\n"
		case "snapshot":
			if p.due(liveSizes{checkpoint: mib("checkpoint"), live: mib("live")}, int64(mib("log"))) {
				return "due\n"
			}
			return "skip\n"
		case "compacted":
			var written uint64
			if d.HasArg("written") {
				written = mib("written")
			}
			p.compacted(liveSizes{checkpoint: mib("checkpoint"), live: mib("live")}, mib("after"), int64(mib("log")), int64(written))
			if p.coolUntil == 0 {
				return "no cool-down\n"
			}
			return fmt.Sprintf("cool-down until %d MiB of log\n", p.coolUntil>>20)
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}
