package shard

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestParseOutputRef reads the --drop arguments of 'shards outputs', one
// per line of the input: what each names, or why it is refused.
func TestParseOutputRef(t *testing.T) {
	datadriven.RunTest(t, "testdata/output_ref", func(t *testing.T, d *datadriven.TestData) string {
		var out strings.Builder
		for _, in := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			txn, idx, err := ParseOutputRef(in)
			switch {
			case err != nil:
				fmt.Fprintf(&out, "%s: error: %v\n", in, err)
			case idx == nil:
				fmt.Fprintf(&out, "%s: every output of txn %d\n", in, txn)
			default:
				fmt.Fprintf(&out, "%s: output %d of txn %d (%s)\n", in, *idx, txn, OutputDrop{Txn: txn, Index: idx})
			}
		}
		return out.String()
	})
}
