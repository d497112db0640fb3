package nexmark

import (
	"testing"

	"github.com/consumerd/consumerd/internal/natsproc"
)

func TestMain(m *testing.M) { natsproc.Main(m) }

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
