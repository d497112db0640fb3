package nexmark

import (
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestQ7 checks q7's model on hand-built bids, and its app against the model
// (see runWinTest).
func TestQ7(t *testing.T) { datadriven.RunTest(t, "testdata/q7", runWinTest) }
