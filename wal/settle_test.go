package wal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/wal/walimpls"
)

func parseOutcome(s string) (settleOutcome, error) {
	switch s {
	case "ok":
		return settleOutcome{dispatched: true}, nil
	case "transient":
		return settleOutcome{dispatched: true, err: errors.New("timeout")}, nil
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

func TestPlanSettle(t *testing.T) {
	f, err := os.Open("testdata/settle.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	cases := 0
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		in, want, ok := strings.Cut(text, "->")
		if !ok {
			t.Fatalf("settle.txt:%d: no '->' in %q", line, text)
		}
		var outs []settleOutcome
		for _, w := range strings.Fields(in) {
			o, err := parseOutcome(w)
			if err != nil {
				t.Fatalf("settle.txt:%d: %v", line, err)
			}
			outs = append(outs, o)
		}
		var got []string
		for _, a := range planSettle(outs) {
			got = append(got, a.String())
		}
		if g, w := strings.Join(got, " "), strings.Join(strings.Fields(want), " "); g != w {
			t.Errorf("settle.txt:%d: %s -> %s, want %s", line, strings.TrimSpace(in), g, w)
		}
		cases++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cases == 0 {
		t.Fatal("no cases in testdata/settle.txt")
	}
}
