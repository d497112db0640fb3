package nexmark

import (
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestQ5 checks q5's model on hand-built bids, and its app against the model
// (see runWinTest).
func TestQ5(t *testing.T) { datadriven.RunTest(t, "testdata/q5", runWinTest) }
