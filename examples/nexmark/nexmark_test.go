package nexmark

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/internal/natsproc"
)

func TestMain(m *testing.M) {
	code := m.Run()
	natsproc.Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// TestQueriesEqualModels runs every query over 20 k events, without and with
// a primary killed mid-run: each output equals its model exactly.
func TestQueriesEqualModels(t *testing.T) {
	for _, kill := range []bool{false, true} {
		name := "steady"
		if kill {
			name = "kill"
		}
		t.Run(name, func(t *testing.T) {
			rows := runQueries(t, Queries(), 20000, kill)
			for _, q := range Queries() {
				t.Logf("%s: %d rows", q.Name, len(rows[q.Name]))
			}
		})
	}
}
