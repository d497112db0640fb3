package nexmark

import (
	"testing"

	"github.com/cockroachdb/datadriven"
)

// See q3_test.go for the test format and driver.

func TestQ8Model(t *testing.T) { datadriven.RunTest(t, "testdata/q8", runJoinTest) }

// TestQ8Generated runs the logic over generated events in shuffled orders.
func TestQ8Generated(t *testing.T) { testJoinGenerated(t, "q8", 20000) }
