package benchround

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// EnvRounds names the environment variable that, when set to a positive
// integer, replaces every benchmark's default number of rounds.
const EnvRounds = "CONSUMERD_BENCH_ROUNDS"

// Rounds returns how many rounds a benchmark whose default is def runs:
// $CONSUMERD_BENCH_ROUNDS when set, else def (at least 1). A value that is
// not a positive integer fails tb.
func Rounds(tb testing.TB, def int) int {
	tb.Helper()
	if s, ok := os.LookupEnv(EnvRounds); ok && s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			tb.Fatalf("benchround: %s=%q is not a positive integer", EnvRounds, s)
		}
		return n
	}
	return max(def, 1)
}

// Figure is one named measurement of one round.
type Figure struct {
	Name  string
	Value float64
	Prec  int // digits after the decimal point in the BENCH line
}

// F returns the figure name=value, printed with prec decimals.
func F(name string, value float64, prec int) Figure {
	return Figure{Name: name, Value: value, Prec: prec}
}

// Result holds the figures of every round, in the order the rounds
// returned them.
type Result struct {
	tb    testing.TB
	names []string
	prec  []int
	vals  [][]float64 // vals[i][r]: figure i in round r
}

// Collect runs round(0), …, round(n-1) with n = Rounds(tb, def), logs each
// round's figures and returns them. Every round must return the same
// figure names in the same order. A round that alternates the order of its
// sides can use its index r for that.
func Collect(tb testing.TB, def int, round func(r int) []Figure) *Result {
	tb.Helper()
	n := Rounds(tb, def)
	res := &Result{tb: tb}
	for r := 0; r < n; r++ {
		figs := round(r)
		if r == 0 {
			for _, f := range figs {
				if slices.Contains(res.names, f.Name) {
					tb.Fatalf("benchround: figure %q twice in a round", f.Name)
				}
				res.names = append(res.names, f.Name)
				res.prec = append(res.prec, f.Prec)
				res.vals = append(res.vals, make([]float64, 0, n))
			}
		}
		if len(figs) != len(res.names) {
			tb.Fatalf("benchround: round %d returned %d figures, round 0 %d", r, len(figs), len(res.names))
		}
		parts := make([]string, len(figs))
		for i, f := range figs {
			if f.Name != res.names[i] {
				tb.Fatalf("benchround: round %d figure %d is %q, round 0's %q", r, i, f.Name, res.names[i])
			}
			res.vals[i] = append(res.vals[i], f.Value)
			parts[i] = f.Name + "=" + format(f.Value, res.prec[i])
		}
		tb.Logf("round %d/%d: %s", r+1, n, strings.Join(parts, " "))
	}
	return res
}

// Rounds returns the number of rounds collected.
func (res *Result) Rounds() int {
	if len(res.vals) == 0 {
		return 0
	}
	return len(res.vals[0])
}

// Values returns figure name's values over the rounds, sorted ascending.
func (res *Result) Values(name string) []float64 {
	res.tb.Helper()
	i := slices.Index(res.names, name)
	if i < 0 {
		res.tb.Fatalf("benchround: no figure %q (have %v)", name, res.names)
	}
	vs := slices.Clone(res.vals[i])
	slices.Sort(vs)
	return vs
}

// Median returns the median of figure name over the rounds (the mean of
// the middle two for an even count).
func (res *Result) Median(name string) float64 {
	res.tb.Helper()
	return median(res.Values(name))
}

// Min returns the smallest value of figure name over the rounds.
func (res *Result) Min(name string) float64 {
	res.tb.Helper()
	return res.Values(name)[0]
}

// Max returns the largest value of figure name over the rounds.
func (res *Result) Max(name string) float64 {
	res.tb.Helper()
	vs := res.Values(name)
	return vs[len(vs)-1]
}

// Quantile returns the nearest-rank q-quantile (0 < q ≤ 1) of figure name
// over the rounds.
func (res *Result) Quantile(name string, q float64) float64 {
	res.tb.Helper()
	vs := res.Values(name)
	i := int(math.Ceil(q*float64(len(vs)))) - 1
	return vs[max(0, min(i, len(vs)-1))]
}

// median returns the median of sorted xs (NaN for none).
func median(sorted []float64) float64 {
	n := len(sorted)
	switch {
	case n == 0:
		return math.NaN()
	case n%2 == 1:
		return sorted[n/2]
	default:
		return (sorted[n/2-1] + sorted[n/2]) / 2
	}
}

// Line returns the BENCH line
//
//	BENCH <name> <params> rounds=N fig=median… min=… max=…
//
// with every figure's median in the rounds' order, then the min and max
// over the rounds of each headline figure: min= and max= for a single
// headline, <fig>_min= and <fig>_max= for several. params (fixed fields
// such as "backend=jetstream msgs=100000") may be empty.
func (res *Result) Line(name, params string, headline ...string) string {
	res.tb.Helper()
	var sb strings.Builder
	sb.WriteString("BENCH ")
	sb.WriteString(name)
	if params != "" {
		sb.WriteString(" ")
		sb.WriteString(params)
	}
	fmt.Fprintf(&sb, " rounds=%d", res.Rounds())
	for i, n := range res.names {
		fmt.Fprintf(&sb, " %s=%s", n, format(res.Median(n), res.prec[i]))
	}
	for _, h := range headline {
		prec := res.prec[slices.Index(res.names, h)]
		pre := ""
		if len(headline) > 1 {
			pre = h + "_"
		}
		fmt.Fprintf(&sb, " %smin=%s %smax=%s", pre, format(res.Min(h), prec), pre, format(res.Max(h), prec))
	}
	return sb.String()
}

// Print writes Line to standard output, where make bench picks it up.
func (res *Result) Print(name, params string, headline ...string) {
	res.tb.Helper()
	fmt.Println(res.Line(name, params, headline...))
}

// Spec describes a benchmark's BENCH line for Run.
type Spec struct {
	Name     string   // after BENCH, e.g. "wal.append"
	Params   string   // fixed fields, e.g. "backend=jetstream msgs=100000"
	Rounds   int      // the default number of rounds
	Headline []string // the figures whose min and max are printed
}

// Run collects s.Rounds rounds of round (see Collect), prints the BENCH
// line (see Line) and returns the result.
func Run(tb testing.TB, s Spec, round func(r int) []Figure) *Result {
	tb.Helper()
	res := Collect(tb, s.Rounds, round)
	res.Print(s.Name, s.Params, s.Headline...)
	return res
}

func format(v float64, prec int) string {
	return strconv.FormatFloat(v, 'f', prec, 64)
}
