package wal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/consumerd/consumerd/wal/walimpls"
)

func parseOutcome(s string) (settleOutcome, error) {
	switch s {
	case "ok":
		return settleOutcome{dispatched: true}, nil
	case "transient":
		return settleOutcome{dispatched: true, err: errors.New("timeout")}, nil
	case "idem":
		return settleOutcome{dispatched: true, err: errors.New("timeout"), idempotent: true}, nil
	case "fenced":
		return settleOutcome{dispatched: true, err: fmt.Errorf("x: %w", ErrFenced)}, nil
	case "closed":
		return settleOutcome{dispatched: true, err: fmt.Errorf("x: %w", ErrClosed)}, nil
	case "permanent":
		return settleOutcome{dispatched: true, err: walimpls.Permanent(errors.New("too big"))}, nil
	case "cancelled":
		return settleOutcome{dispatched: true, err: context.Canceled}, nil
	case "unsent":
		return settleOutcome{err: context.Canceled}, nil
	}
	return settleOutcome{}, fmt.Errorf("unknown outcome %q", s)
}

// TestPlanSettle runs testdata/settle: "plan [chained]" with a drained
// window's outcomes in call order as input, the actions as output.
func TestPlanSettle(t *testing.T) {
	datadriven.RunTest(t, "testdata/settle", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "plan" {
			d.Fatalf(t, "unknown command %q", d.Cmd)
		}
		var outs []settleOutcome
		for _, w := range strings.Fields(d.Input) {
			o, err := parseOutcome(w)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			outs = append(outs, o)
		}
		var got []string
		for _, a := range planSettle(outs, d.HasArg("chained")) {
			got = append(got, a.String())
		}
		return strings.Join(got, " ") + "\n"
	})
}
