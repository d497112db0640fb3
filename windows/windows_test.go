package windows

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestWindows runs testdata/windows:
//
//	tumble size=N         each input line an event time -> its window
//	hop size=N slide=M    each input line an event time -> its windows
//
// A panic is shown as the output ("panic: ...").
func TestWindows(t *testing.T) {
	datadriven.RunTest(t, "testdata/windows", func(t *testing.T, d *datadriven.TestData) string {
		var size, slide int64
		d.ScanArgs(t, "size", &size)
		var assign func(ts int64) []Window
		switch d.Cmd {
		case "tumble":
			assign = func(ts int64) []Window { return []Window{Tumble(ts, size)} }
		case "hop":
			d.ScanArgs(t, "slide", &slide)
			assign = func(ts int64) []Window { return Hop(ts, size, slide, nil) }
		default:
			d.Fatalf(t, "unknown command %q", d.Cmd)
		}
		var b strings.Builder
		for _, line := range strings.Fields(d.Input) {
			ts, err := parseTime(line)
			if err != nil {
				d.Fatalf(t, "event time %q: %v", line, err)
			}
			ws, panicked := catch(func() []Window { return assign(ts) })
			if panicked != "" {
				fmt.Fprintf(&b, "%s: panic: %s\n", line, panicked)
				continue
			}
			fmt.Fprintf(&b, "%s:", line)
			for _, w := range ws {
				if w.Start > ts || (ts > w.MaxTimestamp() && ts != MaxTime) {
					d.Fatalf(t, "window %v does not contain %d", w, ts)
				}
				fmt.Fprintf(&b, " [%s,%s)", fmtTime(w.Start), fmtTime(w.End))
			}
			b.WriteString("\n")
		}
		return b.String()
	})
}

// catch runs f and returns its result, or the value it panicked with.
func catch[T any](f func() T) (v T, panicked string) {
	defer func() {
		if r := recover(); r != nil {
			panicked = fmt.Sprint(r)
		}
	}()
	return f(), ""
}

// TestHopReusesDst checks that Hop appends to dst rather than replacing it.
func TestHopReusesDst(t *testing.T) {
	buf := make([]Window, 1, 8)
	buf[0] = Window{Start: -1, End: -1}
	got := Hop(12, 10, 5, buf)
	want := []Window{{-1, -1}, {5, 15}, {10, 20}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Hop(12, 10, 5, buf) = %v, want %v", got, want)
	}
	if &got[0] != &buf[0] {
		t.Fatalf("Hop reallocated although dst had room")
	}
}
