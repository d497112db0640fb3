package bytesize

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestBytesize runs testdata/bytesize: "parse" reads each line of the
// input, "format" writes each number of it.
func TestBytesize(t *testing.T) {
	datadriven.RunTest(t, "testdata/bytesize", func(t *testing.T, d *datadriven.TestData) string {
		var out string
		for _, line := range splitLines(d.Input) {
			switch d.Cmd {
			case "parse":
				n, err := Parse(line)
				if err != nil {
					out += fmt.Sprintf("%s -> error: %v\n", line, err)
				} else {
					out += fmt.Sprintf("%s -> %d\n", line, n)
				}
			case "format":
				n, err := strconv.ParseUint(line, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				out += fmt.Sprintf("%d -> %s\n", n, Format(n))
			default:
				t.Fatalf("unknown command %q", d.Cmd)
			}
		}
		return out
	})
}

func splitLines(s string) []string {
	var lines []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '\n' {
			if i > start {
				lines = append(lines, s[start:i])
			}
			start = i + 1
		}
	}
	return lines
}
