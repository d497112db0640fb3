package benchround

import (
	"math"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{1, 2, 9}, 2},
		{[]float64{1, 2, 4, 9}, 3},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median(nil) = %v, want NaN", got)
	}
}

func TestRounds(t *testing.T) {
	t.Setenv(EnvRounds, "")
	if got := Rounds(t, 5); got != 5 {
		t.Errorf("default: %d rounds, want 5", got)
	}
	if got := Rounds(t, 0); got != 1 {
		t.Errorf("default 0: %d rounds, want 1", got)
	}
	t.Setenv(EnvRounds, "2")
	if got := Rounds(t, 5); got != 2 {
		t.Errorf("%s=2: %d rounds, want 2", EnvRounds, got)
	}
}

func TestLine(t *testing.T) {
	t.Setenv(EnvRounds, "")
	rates := [][2]float64{{90, 100}, {80, 100}, {99, 90}, {50, 100}, {95, 95}}
	var order []int
	res := Collect(t, 5, func(r int) []Figure {
		order = append(order, r)
		rate, raw := rates[r][0], rates[r][1]
		return []Figure{F("rate", rate, 0), F("raw_rate", raw, 0), F("ratio", rate/raw, 2)}
	})
	if len(order) != 5 || order[4] != 4 {
		t.Fatalf("rounds run: %v", order)
	}
	// ratio per round: 0.9 0.8 1.1 0.5 1.0 → median 0.9; rates' median 90.
	if got, want := res.Line("wal.append", "backend=jetstream"), "BENCH wal.append backend=jetstream rounds=5 rate=90 raw_rate=100 ratio=0.90"; got != want {
		t.Errorf("Line = %q\nwant   %q", got, want)
	}
	if got, want := res.Line("wal.append", "backend=jetstream", "ratio"), "BENCH wal.append backend=jetstream rounds=5 rate=90 raw_rate=100 ratio=0.90 min=0.50 max=1.10"; got != want {
		t.Errorf("Line = %q\nwant   %q", got, want)
	}
	want2 := "BENCH x rounds=5 rate=90 raw_rate=100 ratio=0.90 rate_min=50 rate_max=99 ratio_min=0.50 ratio_max=1.10"
	if got := res.Line("x", "", "rate", "ratio"); got != want2 {
		t.Errorf("Line = %q\nwant   %q", got, want2)
	}
	if got := res.Quantile("rate", 0.5); got != 90 {
		t.Errorf("p50 = %v, want 90", got)
	}
	if got := res.Quantile("rate", 0.99); got != 99 {
		t.Errorf("p99 = %v, want 99", got)
	}
}
