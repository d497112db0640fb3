package nexmark

import (
	"testing"

	"github.com/cockroachdb/datadriven"
)

// See q3_test.go for the test format and driver.

func TestQ8Model(t *testing.T) { datadriven.RunTest(t, "testdata/q8", runJoinTest) }

func TestQ8App(t *testing.T) {
	q, _ := Lookup("q8")
	rows := runQueries(t, []Query{q}, 20000, false)["q8"]
	t.Logf("q8: %d rows", len(rows))
	if len(rows) == 0 {
		t.Error("q8: no rows: the test run joins nothing")
	}
}

func TestQ8AppKill(t *testing.T) {
	q, _ := Lookup("q8")
	runQueries(t, []Query{q}, 20000, true)
}

// TestQ8Generated runs the logic over generated events in shuffled orders.
func TestQ8Generated(t *testing.T) { testJoinGenerated(t, "q8", 20000) }
